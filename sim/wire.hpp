// The simulation process's result through its pipe: a Timeline as bytes
// ([ranks][count][op stage mb start end]...), and the scalars around it.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>

#include "schedule/error.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::sim {

inline void put_bytes(std::string& out, const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); }
template <class T>
void put(std::string& out, T v) { put_bytes(out, &v, sizeof v); }
template <class T>
T take(const std::string& in, std::size_t& pos) {
  if (pos + sizeof(T) > in.size()) throw Error("simulation: truncated result from the simulation process");
  T v;
  std::memcpy(&v, in.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

std::string encode(const schedule::Timeline& t);
// Throws pipetwin::Error on a truncated input.
schedule::Timeline decode(const std::string& in);

}  // namespace pipetwin::sim
