// Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with the HTTP status
// that goes with them (400 naming the field, 401, 404, 413, 429, 500, 503). Owns plain values.
#pragma once

#include <string>

#include "base/status.h"

namespace dsv41::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null

  std::string json() const;  // the response body
};

// 400 for the request field `param`.
ApiError bad_field(const std::string& param, const std::string& message, const std::string& code = "invalid_value");
// A library Status: invalid_argument / out_of_range -> 400, unsupported -> 400, the rest 500.
ApiError from_status(const Status& s, const std::string& param = "");
// An error the engine reported for an admitted request: a bad value (e.g. a logit_bias id
// outside the vocabulary) is the client's (400), anything else (the KV page budget, an internal
// error) the server's (500).
ApiError engine_error(const Status& s);
ApiError unauthorized();
ApiError not_found(const std::string& what, const std::string& code = "not_found");
ApiError queue_full(const std::string& message);
ApiError internal(const std::string& message);

}  // namespace dsv41::server
