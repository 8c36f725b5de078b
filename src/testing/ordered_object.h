// A large nlohmann::ordered_json object built key by key. ordered_json's operator[] finds a key by
// a linear search, so n insertions cost O(n²) string compares: tens of seconds for a 129K-token
// vocabulary. This keeps a hash index beside the items and gives the same object: insertion
// order, and a repeated key keeps its first place and takes the last value.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

namespace dsv41 {

class OrderedObjectBuilder {
 public:
  using Json = nlohmann::ordered_json;

  void set(const std::string& key, Json value) {
    auto& items = static_cast<Json::object_t::Container&>(items_);  // the vector, not the map's search
    auto [it, added] = index_.try_emplace(key, items.size());
    if (added)
      items.emplace_back(key, std::move(value));
    else
      items[it->second].second = std::move(value);
  }

  Json take() {
    Json out = Json::object();
    out.get_ref<Json::object_t&>() = std::move(items_);
    index_.clear();
    return out;
  }

 private:
  Json::object_t items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace dsv41
