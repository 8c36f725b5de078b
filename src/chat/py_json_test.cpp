// Python-compatible JSON (py_json.h): repr() floats, json.dumps escaping, key order and
// duplicate keys, integers beyond 64 bits.
#include "src/chat/py_json.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dsv41::chat {
namespace {

TEST(ChatPyJson, FloatRepr) {
  EXPECT_EQ(py_float_repr(1.0), "1.0");
  EXPECT_EQ(py_float_repr(100.0), "100.0");
  EXPECT_EQ(py_float_repr(0.1), "0.1");
  EXPECT_EQ(py_float_repr(1e-7), "1e-07");
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(py_float_repr(0.0), "0.0");
  EXPECT_EQ(py_float_repr(1.5e300), "1.5e+300");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(py_float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(0.00001), "1e-05");
  EXPECT_EQ(py_float_repr(5e-324), "5e-324");
  EXPECT_EQ(py_float_repr(123456789.123), "123456789.123");
  EXPECT_EQ(py_float_repr(-2.5), "-2.5");
  EXPECT_EQ(py_float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(py_float_repr(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(py_float_repr(std::nan("")), "NaN");
}

TEST(ChatPyJson, DumpsLikePython) {
  auto j = parse_json_ordered(R"({"b": 1, "a": [true, null, 1e2, "x\"\\\n\t\b\f\r\u0001\u001f"], "c": {}})", "t");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(py_json_dumps(j.value()),
            R"({"b": 1, "a": [true, null, 100.0, "x\"\\\n\t\b\f\r\u0001\u001f"], "c": {}})");
  // U+007F, U+2028 and non-ASCII stay raw.
  EXPECT_EQ(py_json_string("\x7f\xe2\x80\xa8é🙂"), "\"\x7f\xe2\x80\xa8é🙂\"");
  // Invalid UTF-8 becomes U+FFFD (JSON text must be UTF-8).
  EXPECT_EQ(py_json_string("a\xff"), "\"a\xEF\xBF\xBD\"");
}

TEST(ChatPyJson, DuplicateKeysKeepFirstPositionLastValue) {
  auto j = parse_json_ordered(R"({"limit": 1, "key": "k", "limit": 3})", "t");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(py_json_dumps(j.value()), R"({"limit": 3, "key": "k"})");
}

TEST(ChatPyJson, BigIntegersStayExact) {
  auto j = parse_json_ordered(R"([12345678901234567890, 123456789012345678901234567890, -98765432109876543210, -0])", "t");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(py_json_dumps(j.value()), "[12345678901234567890, 123456789012345678901234567890, -98765432109876543210, 0]");
  EXPECT_TRUE(is_big_integer(j.value()[1]));
  EXPECT_TRUE(py_truthy(j.value()[1]));
}

TEST(ChatPyJson, ErrorsAreValues) {
  auto bad = parse_json_ordered("{\"a\": ", "args");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("args: invalid JSON"), std::string::npos);
  EXPECT_FALSE(parse_json_ordered("[1] trailing", "t").ok());
  EXPECT_FALSE(parse_json_ordered("NaN", "t").ok());
  EXPECT_FALSE(parse_json_ordered("\"\xff\"", "t").ok());  // ill-formed UTF-8
}

TEST(ChatPyJson, Truthiness) {
  for (const char* falsy : {"null", "false", "0", "0.0", "\"\"", "[]", "{}"})
    EXPECT_FALSE(py_truthy(parse_json_ordered(falsy, "t").value())) << falsy;
  for (const char* truthy : {"true", "1", "-0.5", "\"x\"", "[0]", "{\"a\": null}"})
    EXPECT_TRUE(py_truthy(parse_json_ordered(truthy, "t").value())) << truthy;
}

}  // namespace
}  // namespace dsv41::chat
