// What schedule_digest (schedule.hpp) hashes, as a byte stream handed to a sink: every field of
// the schedule in a fixed order, each value a little-endian 8-byte integer and each string its
// length (so encoded) before its bytes, so that no two different schedules give the same bytes.
// schedule_digest hashes this stream with XXH3-64; bench/bench_digest.cpp hashes the same stream
// with FNV-1a (the digest before issue 25 item 9) to compare the two.
#pragma once

#include <cstdint>
#include <string>

#include "schedule/schedule.hpp"

namespace ppsched {

// `Sink` has add(uint64_t) for a value and bytes(const std::string&) for a string's bytes.
template <class Sink>
class DigestFields {
 public:
  explicit DigestFields(Sink& sink) : out_(sink) {}

  void schedule(const Schedule& s) {
    text(s.name);
    out_.add(static_cast<uint64_t>(s.ranks));
    out_.add(static_cast<uint64_t>(s.stages));
    out_.add(static_cast<uint64_t>(s.micro_batches));
    out_.add(static_cast<uint64_t>(s.placement.kind));
    ints(s.placement.stage_to_rank);
    out_.add(s.mpipe ? 1 : 0);
    if (s.mpipe) {
      out_.add(static_cast<uint64_t>(s.mpipe->overflow));
      out_.add(static_cast<uint64_t>(s.mpipe->tower));
      out_.add(s.mpipe->owner_backward ? 1 : 0);
      ints(s.mpipe->owners);
    }
    out_.add(static_cast<uint64_t>(s.pipes));
    ints(s.micro_pipe);
    out_.add(static_cast<uint64_t>(s.programs.size()));
    for (const Program& p : s.programs) {
      out_.add(static_cast<uint64_t>(p.size()));
      for (const Slot& slot : p) {
        out_.add(slot ? 1 : 0);
        if (slot) step(*slot);
      }
    }
  }

 private:
  void text(const std::string& s) {
    out_.add(static_cast<uint64_t>(s.size()));
    out_.bytes(s);
  }
  template <class V>
  void ints(const V& v) {
    out_.add(static_cast<uint64_t>(v.size()));
    for (auto x : v) out_.add(static_cast<uint64_t>(static_cast<int64_t>(x)));
  }
  void step(const Step& st) {
    out_.add(static_cast<uint64_t>(st.op));
    out_.add(static_cast<uint64_t>(static_cast<int64_t>(st.micro)));
    out_.add(static_cast<uint64_t>(static_cast<int64_t>(st.stage)));
    out_.add(static_cast<uint64_t>(static_cast<int64_t>(st.peer)));
    ints(st.group());
    out_.add(static_cast<uint64_t>(st.tensors().size()));
    for (const TensorDesc& t : st.tensors()) {
      ints(t.shape);
      text(t.dtype);
    }
    out_.add(static_cast<uint64_t>(st.sub_steps().size()));
    for (const Step& sub : st.sub_steps()) step(sub);
  }

  Sink& out_;
};

}  // namespace ppsched
