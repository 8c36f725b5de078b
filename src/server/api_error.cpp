// OpenAI error bodies (see api_error.h).
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace dsv41::server {

std::string ApiError::json() const {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param);
  e["code"] = code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code);
  nlohmann::ordered_json out;
  out["error"] = std::move(e);
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

ApiError bad_field(const std::string& param, const std::string& message, const std::string& code) {
  return ApiError{400, message, "invalid_request_error", param, code};
}

ApiError from_status(const Status& s, const std::string& param) {
  switch (s.kind()) {
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kOutOfRange:
      return ApiError{400, s.message(), "invalid_request_error", param, "invalid_value"};
    case ErrorKind::kUnsupported:
      return ApiError{400, s.message(), "invalid_request_error", param, "unsupported_value"};
    default:
      return internal(s.to_string());
  }
}

ApiError engine_error(const Status& s) {
  if (s.kind() == ErrorKind::kInvalidArgument) return from_status(s);
  return ApiError{500, s.message(), "server_error", "", s.kind() == ErrorKind::kOutOfRange ? "capacity_exceeded" : "internal_error"};
}

ApiError unauthorized() {
  return ApiError{401, "Missing or invalid API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY').",
                  "authentication_error", "", "invalid_api_key"};
}

ApiError not_found(const std::string& what, const std::string& code) {
  return ApiError{404, what, "invalid_request_error", "", code};
}

ApiError queue_full(const std::string& message) {
  return ApiError{429, message, "rate_limit_error", "", "queue_full"};
}

ApiError internal(const std::string& message) { return ApiError{500, message, "server_error", "", "internal_error"}; }

}  // namespace dsv41::server
