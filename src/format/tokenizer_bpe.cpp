// Byte-level BPE merge loop (see tokenizer_bpe.h).
#include "format/tokenizer_bpe.h"

#include <bit>
#include <queue>

namespace dsv41 {
namespace {

struct Symbol {
  TokenId id;
  int32_t prev, next;  // neighbours in the linked list, -1 at the ends
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol
  TokenId merged;
  // priority_queue is a max-heap: "greater" means later (higher rank, then further right).
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void BpeMerger::set_merges(const std::vector<MergeRule>& merges) {
  size_t cap = 16;
  while (cap < 2 * merges.size()) cap *= 2;
  slots_.assign(cap, Slot{kEmpty, {0, 0}});
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const MergeRule& m = merges[rank];
    const uint64_t k = key(m.left, m.right);
    size_t i = hash(k);
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
    slots_[i] = {k, {static_cast<int32_t>(rank), m.merged}};
  }
}

void BpeMerger::encode(std::string_view piece, std::vector<TokenId>& out) const {
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  bool last_was_unk = false;
  for (char c : piece) {
    TokenId id = initial_[static_cast<uint8_t>(c)];
    if (id < 0) {
      if (unk_id_ < 0) continue;  // no unk token: Hugging Face drops the byte
      if (fuse_unk_ && last_was_unk) continue;
      id = unk_id_;
      last_was_unk = true;
    } else {
      last_was_unk = false;
    }
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  std::priority_queue<Candidate> queue;
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) {
    if (const Merge* m = find(sym[i].id, sym[i + 1].id)) queue.push({m->rank, i, m->merged});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    // Stale entry: the pair at this position has changed since it was queued.
    const Merge* m = find(left.id, right.id);
    if (m == nullptr || m->merged != top.merged) continue;
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* p = find(sym[left.prev].id, left.id)) queue.push({p->rank, left.prev, p->merged});
    }
    if (left.next >= 0) {
      if (const Merge* n = find(left.id, sym[left.next].id)) queue.push({n->rank, top.pos, n->merged});
    }
  }
  for (const Symbol& s : sym) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace dsv41
