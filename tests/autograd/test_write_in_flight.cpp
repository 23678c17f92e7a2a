// tests/autograd/test_write_in_flight.cpp — Note [Reads of a tensor still being
// written]: an op reading a marked tensor, or any view of its storage, old or
// new, in or out of grad mode, throws with the writer's message; unmarked (as
// many times as marked) it computes again; other tensors are never refused.
// Read before: autograd/write_in_flight.h. Read next: tests/distributed/test_zero_deferred.cpp.
#include <doctest/doctest.h>

#include "autograd/write_in_flight.h"
#include "lockstep.h"
#include "tests/support/errors.h"

namespace ls = lockstep;
using ls::testing::contains;
using ls::testing::error_of;

TEST_CASE("write in flight: an op reading a marked tensor or a view of it is refused with the writer's message") {
  ls::Tensor p = ls::full({2, 3}, 2.5);
  p.requires_grad_();
  const ls::Tensor old_view = p.detach().view({6});  // made before the mark: same storage
  const ls::Tensor other = ls::ones({2, 3});
  ls::autograd::mark_write_in_flight(p, "the writer says: call wait() first");
  CHECK(ls::autograd::write_in_flight(p));
  CHECK(ls::autograd::write_in_flight(old_view));
  CHECK_FALSE(ls::autograd::write_in_flight(other));
  const std::string e = error_of([&] { (void)p.sum(); });
  CHECK_MESSAGE(contains(e, "an op read a tensor of shape [2, 3] whose values are still being written: "
                            "the writer says: call wait() first"), e);
  CHECK(contains(error_of([&] { (void)(other + old_view.view({2, 3})); }), "[6] whose values are still"));
  {
    ls::NoGradGuard no_grad;
    CHECK(contains(error_of([&] { (void)(p * 2.0); }), "the writer says"));
  }
  CHECK(ls::equal((other * 2.0).sum(), ls::full({}, 12.0)));  // unmarked tensors compute as before
  ls::autograd::mark_write_in_flight(p, "the writer says: call wait() first");  // marks count
  ls::autograd::unmark_write_in_flight(p);
  CHECK(contains(error_of([&] { (void)p.sum(); }), "still being written"));
  ls::autograd::unmark_write_in_flight(p);
  CHECK_FALSE(ls::autograd::write_in_flight(p));
  CHECK(p.sum().item<double>() == 15.0);
  CHECK(old_view.sum().item<double>() == 15.0);  // 6 x 2.5
}
