#include "base/status.h"

namespace dsv41 {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return "invalid argument";
    case ErrorKind::kNotFound: return "not found";
    case ErrorKind::kCorrupt: return "corrupt";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kIo: return "i/o error";
    case ErrorKind::kOutOfRange: return "out of range";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

std::string Status::to_string() const {
  if (ok_) return "ok";
  return std::string(error_kind_name(kind_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok_) return *this;
  return Status(kind_, context + ": " + message_);
}

Status invalid_argument(std::string m) { return {ErrorKind::kInvalidArgument, std::move(m)}; }
Status not_found(std::string m) { return {ErrorKind::kNotFound, std::move(m)}; }
Status corrupt(std::string m) { return {ErrorKind::kCorrupt, std::move(m)}; }
Status unsupported(std::string m) { return {ErrorKind::kUnsupported, std::move(m)}; }
Status io_error(std::string m) { return {ErrorKind::kIo, std::move(m)}; }
Status out_of_range(std::string m) { return {ErrorKind::kOutOfRange, std::move(m)}; }
Status internal_error(std::string m) { return {ErrorKind::kInternal, std::move(m)}; }

}  // namespace dsv41
