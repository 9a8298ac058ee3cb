// The three error kinds (README.md "Conventions"): InputError for bad user input, InternalError
// for broken invariants (SHARDTUNE_CHECK, active in every build type). Expected outcomes are
// values, not errors.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardtune {

// Bad user input: the message names where (file + JSON pointer, or flag), what was expected and
// what was found, e.g. "cluster.json:/nodes: expected integer >= 1, got 0".
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

// A bug: an invariant of ours does not hold. Carries file:line.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

// Throws one InputError listing every problem, joined by "; " (Validate() reports all problems
// together, README.md "Conventions"). Does nothing when `problems` is empty.
inline void ThrowIfProblems(const std::vector<std::string>& problems) {
  if (problems.empty()) return;
  std::string msg;
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  throw InputError(msg);
}

namespace internal {
// Collects the streamed context of a failed SHARDTUNE_CHECK and throws InternalError when the
// full expression ends. Only ever constructed by the macro, never during unwinding.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    os_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  ~CheckFailure() noexcept(false) { throw InternalError(os_.str()); }
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};
}  // namespace internal

}  // namespace shardtune

#define SHARDTUNE_CHECK(cond) \
  if (cond) {                 \
  } else                      \
    ::shardtune::internal::CheckFailure(__FILE__, __LINE__, #cond)
