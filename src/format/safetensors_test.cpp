// Tests for the safetensors reader/writer: every header validation error on generated files,
// sharded indexes, a writer round trip over all dtypes, and the golden fixture checkpoints.
#include "format/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "tests/golden_file.h"

namespace dsv41 {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dsv41_st_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<uint8_t> le64(uint64_t n) {
  std::vector<uint8_t> v(8);
  for (int i = 0; i < 8; ++i) v[i] = static_cast<uint8_t>(n >> (8 * i));
  return v;
}

// A file: 8-byte length of `header`, `header`, then `data_bytes` zero bytes.
std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> f(8 + header.size() + data_bytes, 0);
  for (int i = 0; i < 8; ++i) f[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::memcpy(f.data() + 8, header.data(), header.size());
  return f;
}

Status parse(const std::string& header, size_t data_bytes) {
  auto f = raw_file(header, data_bytes);
  return parse_safetensors(f, "x.safetensors").status();
}

// Expects a failure whose message contains every string in `parts` (and the file name).
void expect_error(const Status& s, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("x.safetensors"), std::string::npos) << s.message();
  for (const auto& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
}

TEST(Safetensors, ParsesMinimalValidHeader) {
  auto f = raw_file(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                    R"("b":{"dtype":"BF16","shape":[],"data_offsets":[24,26]},"e":{"dtype":"I8","shape":[0,5],"data_offsets":[26,26]}})",
                    26);
  auto h = parse_safetensors(f, "x.safetensors");
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(h->tensors[0].name, "a");
  EXPECT_EQ(h->tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->tensors[1].dtype, DType::kBF16);
  EXPECT_EQ(h->metadata.at("format"), "pt");
  EXPECT_EQ(h->data_size, 26u);
}

TEST(Safetensors, RejectsTooShortFile) {
  std::vector<uint8_t> f = {1, 2, 3};
  expect_error(parse_safetensors(f, "x.safetensors").status(), {"too short"});
}

TEST(Safetensors, RejectsHeaderLengthPastEnd) {
  auto f = le64(1000);
  f.push_back('{');
  Status s = parse_safetensors(f, "x.safetensors").status();
  expect_error(s, {"header length 1000 past the end"});
  EXPECT_EQ(s.kind(), ErrorKind::kCorrupt);
}

TEST(Safetensors, RejectsHeaderLengthAboveLimit) {
  auto f = le64(kMaxHeaderBytes + 1);
  Status s = parse_safetensors(f, "x.safetensors").status();
  expect_error(s, {"exceeds"});
  EXPECT_EQ(s.kind(), ErrorKind::kOutOfRange);
  auto g = le64(~0ull);  // must not overflow the bounds arithmetic
  EXPECT_FALSE(parse_safetensors(g, "x.safetensors").ok());
}

TEST(Safetensors, RejectsInvalidJson) {
  expect_error(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4), {"invalid JSON"});
  expect_error(parse("", 0), {"invalid JSON"});
  expect_error(parse(R"([1,2])", 0), {"not a JSON object"});
  expect_error(parse(R"({"a":[[[[[[1]]]]]]})", 0), {"nests deeper"});
}

TEST(Safetensors, RejectsBadUtf8) {
  std::string h = "{\"a\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  expect_error(parse(h, 4), {"not valid UTF-8"});
  std::string overlong = "{\"\xc0\xaf\":1}";  // overlong '/'
  expect_error(parse(overlong, 0), {"not valid UTF-8"});
  std::string surrogate = "{\"\xed\xa0\x80\":1}";
  expect_error(parse(surrogate, 0), {"not valid UTF-8"});
  // Valid multi-byte names pass.
  EXPECT_TRUE(parse("{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1).ok());
}

TEST(Safetensors, RejectsUnknownDtypeNamingTensor) {
  Status s = parse(R"({"w.weight":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8);
  expect_error(s, {"'w.weight'", "unsupported dtype 'F64'"});
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported);
  expect_error(parse(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,8]}})", 8), {"'w'", "dtype"});
}

TEST(Safetensors, RejectsShapeBytesMismatch) {
  expect_error(parse(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16),
               {"'w'", "needs 16 bytes", "hold 12"});
  expect_error(parse(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), {"'w'", "non-negative"});
  expect_error(parse(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), {"'w'", "non-negative"});
  expect_error(parse(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}})", 4),
               {"'w'", "overflows"});
  expect_error(parse(R"({"w":{"dtype":"F32","shape":"[1]","data_offsets":[0,4]}})", 4), {"'w'", "shape"});
}

TEST(Safetensors, RejectsBadOffsets) {
  expect_error(parse(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 8), {"'w'", "past the end"});
  expect_error(parse(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 8), {"'w'", "end before begin"});
  expect_error(parse(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 8), {"'w'", "data_offsets"});
  expect_error(parse(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", 8), {"'w'", "data_offsets"});
  expect_error(parse(R"({"w":{"dtype":"F32","shape":[1]}})", 8), {"'w'", "data_offsets"});
}

TEST(Safetensors, RejectsOverlappingOffsets) {
  Status s = parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   12);
  expect_error(s, {"'a'", "'b'", "overlap"});
  // A tensor inside a larger one, listed first.
  expect_error(parse(R"({"small":{"dtype":"U8","shape":[1],"data_offsets":[5,6]},)"
                     R"("big":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},)"
                     R"("after":{"dtype":"U8","shape":[1],"data_offsets":[10,11]}})",
                     11),
               {"'small'", "'big'", "overlap"});
  // Adjacent tensors and empty tensors do not overlap.
  EXPECT_TRUE(parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]},)"
                    R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                    8)
                  .ok());
}

TEST(Safetensors, RejectsDuplicateNames) {
  expect_error(parse(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})", 2),
               {"duplicate key 'w'"});
  expect_error(parse(R"({"w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1), {"duplicate key 'dtype'"});
}

TEST(Safetensors, RejectsMalformedEntriesAndMetadata) {
  expect_error(parse(R"({"w":[1,2]})", 0), {"'w'", "not a JSON object"});
  expect_error(parse(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}})", 1), {"'w'", "unknown field 'extra'"});
  expect_error(parse(R"({"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1), {"empty tensor name"});
  expect_error(parse(R"({"__metadata__":{"format":1}})", 0), {"__metadata__", "'format'"});
  expect_error(parse(R"({"__metadata__":[1]})", 0), {"__metadata__"});
}

TEST(Safetensors, AcceptsAllDtypes) {
  for (const char* d : {"F32", "F16", "BF16", "F8_E4M3", "F8_E8M0", "I8", "U8", "I32", "I64", "BOOL"}) {
    auto dt = parse_dtype(d);
    ASSERT_TRUE(dt.has_value()) << d;
    EXPECT_STREQ(dtype_name(*dt), d);
    size_t n = dtype_size(*dt);
    std::string h = std::string(R"({"w":{"dtype":")") + d + R"(","shape":[3],"data_offsets":[0,)" + std::to_string(3 * n) + "]}}";
    EXPECT_TRUE(parse(h, 3 * n).ok()) << d;
  }
  EXPECT_FALSE(parse_dtype("F64").has_value());
  EXPECT_FALSE(parse_dtype("f32").has_value());
}

// ---- files and the writer ---------------------------------------------------------------

TEST(Safetensors, WriterRoundTripsEveryDtype) {
  TempDir dir;
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<TensorView> tensors;
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E8M0,
                       DType::kI8,  DType::kU8,  DType::kI32,  DType::kI64,    DType::kBool};
  int k = 0;
  for (DType d : all) {
    std::vector<int64_t> shape = {k + 1, 3};
    std::vector<uint8_t> b(static_cast<size_t>((k + 1) * 3) * dtype_size(d));
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7 + k);
    buffers.push_back(std::move(b));
    tensors.push_back({std::string("t.") + dtype_name(d), d, shape, {}, ""});
    ++k;
  }
  tensors.push_back({"empty", DType::kF32, {0, 7}, {}, ""});
  buffers.emplace_back();
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = buffers[i];
  const std::string path = dir.file("rt.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}, {"note", "é"}}).ok());

  auto set = TensorSet::open(path);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->size(), tensors.size());
  EXPECT_EQ(set->metadata().at("note"), "é");
  for (const TensorView& t : tensors) {
    auto v = set->get(t.name);
    ASSERT_TRUE(v.ok()) << t.name;
    EXPECT_EQ(v->dtype, t.dtype);
    EXPECT_EQ(v->shape, t.shape);
    EXPECT_EQ(v->file, path);
    ASSERT_EQ(v->bytes.size(), t.bytes.size());
    EXPECT_TRUE(std::equal(v->bytes.begin(), v->bytes.end(), t.bytes.begin())) << t.name;
  }
  // Header padded so the data section starts 8-byte aligned.
  auto bytes = serialize_safetensors(tensors, {});
  ASSERT_TRUE(bytes.ok());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | (*bytes)[i];
  EXPECT_EQ(n % 8, 0u);
  // The streamed file and the in-memory serialisation are the same bytes.
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  auto on_disk = read_file(path);
  ASSERT_TRUE(on_disk.ok());
  EXPECT_EQ(std::vector<uint8_t>(on_disk->begin(), on_disk->end()), *bytes);
  EXPECT_FALSE(set->get("nope").ok());
  EXPECT_NE(set->get("nope").status().message().find("'nope'"), std::string::npos);
}

TEST(Safetensors, WriterRejectsBadInputAndWritesNothing) {
  TempDir dir;
  std::vector<uint8_t> four(4);
  const std::string path = dir.file("bad.safetensors");
  std::vector<TensorView> dup = {{"a", DType::kF32, {1}, four, ""}, {"a", DType::kF32, {1}, four, ""}};
  EXPECT_NE(write_safetensors(path, dup).message().find("duplicate"), std::string::npos);
  std::vector<TensorView> wrong = {{"a", DType::kF32, {2}, four, ""}};
  EXPECT_NE(write_safetensors(path, wrong).message().find("needs 8 bytes"), std::string::npos);
  std::vector<TensorView> meta = {{"__metadata__", DType::kF32, {1}, four, ""}};
  EXPECT_FALSE(write_safetensors(path, meta).ok());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(write_safetensors(dir.file("no/such/dir.safetensors"), std::vector<TensorView>{}).ok());
}

TEST(Safetensors, TruncatedFileFailsNamingFileAndTensor) {
  TempDir dir;
  std::vector<uint8_t> data(64, 1);
  std::vector<TensorView> t = {{"a", DType::kF32, {8}, std::span(data).first(32), ""},
                               {"b", DType::kF32, {8}, std::span(data).subspan(32), ""}};
  const std::string path = dir.file("trunc.safetensors");
  ASSERT_TRUE(write_safetensors(path, t).ok());
  fs::resize_file(path, fs::file_size(path) - 5);
  Status s = TensorSet::open(path).status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'b'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("past the end"), std::string::npos) << s.message();
  // Cut inside the header.
  fs::resize_file(path, 20);
  s = TensorSet::open(path).status();
  EXPECT_NE(s.message().find("past the end of the file"), std::string::npos) << s.message();
}

TEST(Safetensors, MissingFileCarriesOsMessage) {
  Status s = TensorSet::open("/nonexistent/dir/model.safetensors").status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kIo);
  EXPECT_NE(s.message().find("/nonexistent/dir/model.safetensors: open: No such file"), std::string::npos) << s.message();
  TempDir dir;
  Status e = TensorSet::open(dir.path()).status();
  EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
}

// ---- sharded ------------------------------------------------------------------------------

struct Shards {
  std::vector<uint8_t> a = std::vector<uint8_t>(8, 1), b = std::vector<uint8_t>(4, 2), c = std::vector<uint8_t>(2, 3);
  void write(const TempDir& dir) {
    std::vector<TensorView> s1 = {{"x.weight", DType::kF32, {2}, a, ""}, {"y.weight", DType::kI32, {1}, b, ""}};
    std::vector<TensorView> s2 = {{"z.weight", DType::kBF16, {1}, c, ""}};
    ASSERT_TRUE(write_safetensors(dir.file("model-00001-of-00002.safetensors"), s1).ok());
    ASSERT_TRUE(write_safetensors(dir.file("model-00002-of-00002.safetensors"), s2).ok());
  }
};

void write_index(const TempDir& dir, const std::string& weight_map) {
  std::ofstream(dir.file("model.safetensors.index.json"))
      << R"({"metadata":{"total_size":14},"weight_map":{)" << weight_map << "}}";
}

const char* kGoodMap = R"("x.weight":"model-00001-of-00002.safetensors","y.weight":"model-00001-of-00002.safetensors",)"
                       R"("z.weight":"model-00002-of-00002.safetensors")";

TEST(SafetensorsSharded, OpensIndexAsOneSet) {
  TempDir dir;
  Shards s;
  s.write(dir);
  write_index(dir, kGoodMap);
  // An unrelated single file in the same directory: the index wins.
  auto set = TensorSet::open(dir.path());
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->size(), 3u);
  EXPECT_EQ(set->num_files(), 2u);
  EXPECT_EQ(set->names(), (std::vector<std::string>{"x.weight", "y.weight", "z.weight"}));
  EXPECT_EQ(set->find("z.weight")->bytes[0], 3);
  EXPECT_NE(set->find("z.weight")->file.find("model-00002-of-00002"), std::string::npos);
  EXPECT_EQ(set->metadata().at("total_size"), "14");
}

TEST(SafetensorsSharded, MissingShard) {
  TempDir dir;
  Shards s;
  s.write(dir);
  write_index(dir, std::string(kGoodMap) + R"(,"w.weight":"model-00003-of-00002.safetensors")");
  Status st = TensorSet::open(dir.path()).status();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.kind(), ErrorKind::kNotFound);
  EXPECT_NE(st.message().find("model-00003-of-00002.safetensors"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'w.weight'"), std::string::npos) << st.message();
}

TEST(SafetensorsSharded, IndexedTensorMissingFromShard) {
  TempDir dir;
  Shards s;
  s.write(dir);
  write_index(dir, std::string(kGoodMap) + R"(,"w.weight":"model-00002-of-00002.safetensors")");
  Status st = TensorSet::open(dir.path()).status();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'w.weight'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("does not contain it"), std::string::npos) << st.message();
}

TEST(SafetensorsSharded, DuplicateAcrossShardsAndUnlisted) {
  TempDir dir;
  Shards s;
  s.write(dir);
  std::vector<TensorView> s3 = {{"x.weight", DType::kF32, {2}, s.a, ""}};
  ASSERT_TRUE(write_safetensors(dir.file("extra.safetensors"), s3).ok());
  write_index(dir, std::string(kGoodMap) + R"(,"q":"extra.safetensors")");
  Status st = TensorSet::open(dir.path()).status();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'x.weight' appears in shard"), std::string::npos) << st.message();

  // A tensor stored in a shard but absent from weight_map.
  write_index(dir, R"("x.weight":"model-00001-of-00002.safetensors","z.weight":"model-00002-of-00002.safetensors")");
  st = TensorSet::open(dir.path()).status();
  EXPECT_NE(st.message().find("'y.weight' in shard 'model-00001-of-00002.safetensors' is not listed"), std::string::npos)
      << st.message();
}

TEST(SafetensorsSharded, RejectsBadIndex) {
  TempDir dir;
  Shards s;
  s.write(dir);
  write_index(dir, R"("x.weight":"../model-00001-of-00002.safetensors")");
  EXPECT_NE(TensorSet::open(dir.path()).status().message().find("not a plain file name"), std::string::npos);
  write_index(dir, R"("x.weight":3)");
  EXPECT_NE(TensorSet::open(dir.path()).status().message().find("not a string"), std::string::npos);
  std::ofstream(dir.file("model.safetensors.index.json")) << R"({"weight_map":{"a":"b", "a":"c"}})";
  EXPECT_NE(TensorSet::open(dir.path()).status().message().find("duplicate key 'a'"), std::string::npos);
  std::ofstream(dir.file("model.safetensors.index.json")) << R"({"metadata":{}})";
  EXPECT_NE(TensorSet::open(dir.path()).status().message().find("weight_map"), std::string::npos);
  std::ofstream(dir.file("model.safetensors.index.json")) << "{\"weight_map\":{\"\xff\":\"b\"}}";
  EXPECT_NE(TensorSet::open(dir.path()).status().message().find("UTF-8"), std::string::npos);
}

// ---- golden fixtures ----------------------------------------------------------------------

const std::string kGolden = DSV41_GOLDEN_DIR;

TEST(SafetensorsGolden, LoadsBothFixturesUnderBothNames) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* fixture : {"v41-tiny-f32", "v41-tiny-bf16"}) {
    auto hf = TensorSet::open(kGolden + "/" + fixture);
    auto rel = TensorSet::open(kGolden + "/" + fixture + "/official");
    ASSERT_TRUE(hf.ok()) << hf.status().to_string();
    ASSERT_TRUE(rel.ok()) << rel.status().to_string();
    EXPECT_EQ(hf->size(), rel->size());
    EXPECT_GT(hf->size(), 100u);
    EXPECT_EQ(hf->metadata().at("format"), "pt");
    const TensorView* a = hf->find("model.layers.0.attn.wq_a.weight");
    const TensorView* b = rel->find("layers.0.attn.wq_a.weight");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->shape, b->shape);
    EXPECT_EQ(a->dtype, b->dtype);
    EXPECT_EQ(0, std::memcmp(a->bytes.data(), b->bytes.data(), a->bytes.size()));
    ASSERT_NE(hf->find("lm_head.weight"), nullptr);
    ASSERT_NE(rel->find("head.weight"), nullptr);
    const bool bf16 = std::string(fixture) == "v41-tiny-bf16";
    EXPECT_EQ(a->dtype, bf16 ? DType::kBF16 : DType::kF32);
    EXPECT_EQ(hf->find("model.layers.0.hc_attn_fn")->dtype, DType::kF32);  // kept f32 in both
  }
  auto golden = TensorSet::open(kGolden + "/v41-tiny-f32/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  EXPECT_EQ(golden->find("s0.input_ids")->dtype, DType::kI64);
}

TEST(SafetensorsGolden, CorruptedCopiesFailCleanly) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto text = read_file(kGolden + "/v41-tiny-f32/official/model.safetensors");
  ASSERT_TRUE(text.ok());
  const std::vector<uint8_t> good(text->begin(), text->end());
  ASSERT_TRUE(parse_safetensors(good, "x.safetensors").ok());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | good[i];

  // A dtype changed: the first "F32" becomes "F16", so its byte count no longer matches.
  std::vector<uint8_t> f = good;
  std::string header(f.begin() + 8, f.begin() + 8 + n);
  size_t at = header.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  f[8 + at + 2] = '1';  // "F32" → "F16"
  f[8 + at + 3] = '6';
  expect_error(parse_safetensors(f, "x.safetensors").status(), {"needs", "bytes"});

  // Truncated anywhere in the data section: the last tensor ends past the end.
  std::vector<uint8_t> t(good.begin(), good.end() - 1);
  expect_error(parse_safetensors(t, "x.safetensors").status(), {"past the end"});

  // Single header bytes flipped (the length bytes and every 1009th header byte, each to two
  // values; fuzz/ does the exhaustive job): never a crash; most flips are caught, and any
  // accepted header still keeps every tensor inside the file.
  int rejected = 0, total = 0;
  std::vector<uint8_t> c = good;
  for (size_t i = 0; i < 8 + n; i += (i < 8 ? 1 : 1009)) {
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}}) {
      c[i] ^= x;
      auto h = parse_safetensors(c, "x.safetensors");
      c[i] ^= x;
      ++total;
      if (!h.ok()) {
        ++rejected;
        continue;
      }
      for (const auto& e : h->tensors) ASSERT_LE(e.end, h->data_size);
    }
  }
  EXPECT_GT(rejected, total / 2);
}

}  // namespace
}  // namespace dsv41
