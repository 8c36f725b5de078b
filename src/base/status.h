// Errors as values. Every loader and parser in dsv41 returns Status or Result<T>; nothing
// exits or throws on bad input. A message names the file, field or tensor and the problem,
// e.g. "model.safetensors: tensor 'layers.3.attn.wkv.weight': shape [512,64] but 256 bytes".
// A failed call leaves its outputs and any object it was called on as they were.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace dsv41 {

enum class ErrorKind {
  kInvalidArgument,  // caller-supplied value is wrong (flag, id, request)
  kNotFound,         // file, tensor, key or token missing
  kCorrupt,          // a file's bytes break its format (truncated, bad header, NaN scale)
  kUnsupported,      // valid but not handled (dtype, model_type, feature)
  kIo,               // the OS said no (open, read, mmap, write)
  kOutOfRange,       // too long (prompt > context), too large (header size limits)
  kInternal,         // a dsv41 invariant broke: a bug
};

const char* error_kind_name(ErrorKind kind);

class Status {
 public:
  Status() = default;  // ok
  Status(ErrorKind kind, std::string message) : ok_(false), kind_(kind), message_(std::move(message)) {}

  bool ok() const { return ok_; }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  // "corrupt: model.safetensors: header length 9e9 past end of file (12345 bytes)"
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context + ": "` (for adding a file name).
  Status with_context(const std::string& context) const;

 private:
  bool ok_ = true;
  ErrorKind kind_ = ErrorKind::kInternal;
  std::string message_;
};

inline Status ok_status() { return {}; }
Status invalid_argument(std::string message);
Status not_found(std::string message);
Status corrupt(std::string message);
Status unsupported(std::string message);
Status io_error(std::string message);
Status out_of_range(std::string message);
Status internal_error(std::string message);

// A value or an error. Implicit from T and from a non-ok Status.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dsv41

#define DSV41_CONCAT_INNER(a, b) a##b
#define DSV41_CONCAT(a, b) DSV41_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not ok.
#define DSV41_RETURN_IF_ERROR(expr)                    \
  do {                                                 \
    ::dsv41::Status dsv41_status_ = (expr);            \
    if (!dsv41_status_.ok()) return dsv41_status_;     \
  } while (0)

// `DSV41_ASSIGN_OR_RETURN(auto x, make_x());` unwraps a Result or returns its Status.
#define DSV41_ASSIGN_OR_RETURN(lhs, expr) \
  DSV41_ASSIGN_OR_RETURN_IMPL(DSV41_CONCAT(dsv41_result_, __LINE__), lhs, expr)
#define DSV41_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
