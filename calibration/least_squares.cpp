// The constrained least squares of calibration (solve, robust_solve) and the
// affine fit on top of them.
#include "calibration/least_squares.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "calibration/traces.hpp"
#include "schedule/error.hpp"

namespace pipetwin::calibration {

namespace {

// A solve in progress: which parameters are still free, which are fixed at
// their value, which are tied to another (and take its value).
class Solver {
 public:
  explicit Solver(const Problem& p) : p_(p), n_(p.params.size()), rows_(p.y.size()), state_(n_, State::Free), tie_(n_, -1) {
    out_.value.assign(n_, 0);
    out_.how.assign(n_, "fitted");
  }

  // 1. Dependencies: keep a column only when it adds to the rank of those kept.
  void settle_dependencies() {
    std::vector<std::size_t> kept;
    for (std::size_t j = 0; j < n_; ++j) {
      if (independent(kept, j)) {
        kept.push_back(j);
      } else {
        settle_dependent(j);
      }
    }
  }

  // 2. Solve, then bound the worst violation and solve again.
  Solution solve_bounded() {
    for (std::size_t round = 0; round <= n_; ++round) {
      const std::vector<std::size_t> free = solve_free();
      const int worst = worst_violation(free);
      if (worst < 0) break;
      // Parameters tied to the bounded one are bounded with it.
      for (std::size_t k = 0; k < n_; ++k) {
        if (state_[k] == State::Tied && tie_[k] == worst) {
          fix(k, p_.params[worst].bound_value, "bounded with " + p_.params[worst].name);
        }
      }
      fix(static_cast<std::size_t>(worst), p_.params[worst].bound_value, p_.params[worst].why_bounded);
    }
    return out_;
  }

 private:
  enum class State { Free, Fixed, Tied };

  Eigen::VectorXd column(std::size_t j) const {
    Eigen::VectorXd c(static_cast<Eigen::Index>(rows_));
    for (std::size_t i = 0; i < rows_; ++i) c(static_cast<Eigen::Index>(i)) = p_.x[i][j];
    return c;
  }

  // Columns of a parameter with every parameter tied to it.
  Eigen::VectorXd merged(std::size_t j) const {
    Eigen::VectorXd c = column(j);
    for (std::size_t k = 0; k < n_; ++k) {
      if (state_[k] == State::Tied && tie_[k] == static_cast<int>(j)) c += column(k);
    }
    return c;
  }

  void fix(std::size_t j, double v, const std::string& how) {
    state_[j] = State::Fixed;
    out_.value[j] = v;
    out_.how[j] = how;
  }

  // Whether column j adds to the rank of the columns `kept` (each scaled to unit norm).
  bool independent(const std::vector<std::size_t>& kept, std::size_t j) const {
    const Eigen::VectorXd c = column(j);
    if (!(c.norm() > 0)) return false;
    Eigen::MatrixXd m(static_cast<Eigen::Index>(rows_), static_cast<Eigen::Index>(kept.size() + 1));
    for (std::size_t k = 0; k < kept.size(); ++k) {
      const Eigen::VectorXd ck = column(kept[k]);
      m.col(static_cast<Eigen::Index>(k)) = ck / ck.norm();
    }
    m.col(static_cast<Eigen::Index>(kept.size())) = c / c.norm();
    Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(m);
    qr.setThreshold(1e-9);
    return qr.rank() == static_cast<Eigen::Index>(kept.size() + 1);
  }

  // A dependent column's parameter: fixed, or tied to a free one.
  void settle_dependent(std::size_t j) {
    const Param& q = p_.params[j];
    if (column(j).norm() == 0) {
      fix(j, q.on_dependent == Param::OnDependent::FixValue ? q.fixed_value : 0, "not observed");
    } else if (q.on_dependent == Param::OnDependent::Tie && q.tie_to >= 0 && state_[q.tie_to] == State::Free) {
      state_[j] = State::Tied;
      tie_[j] = q.tie_to;
      out_.how[j] = "tied to " + p_.params[q.tie_to].name + ": " + q.why_dependent;
    } else if (q.on_dependent == Param::OnDependent::FixValue) {
      fix(j, q.fixed_value, "kept: " + q.why_dependent);
    } else {
      fix(j, 0, "fixed to 0: " + q.why_dependent);
    }
  }

  // The free parameters' least squares on y less the fixed ones' share (tied
  // columns merged into theirs); returns the free parameters.
  std::vector<std::size_t> solve_free() {
    std::vector<std::size_t> free;
    for (std::size_t j = 0; j < n_; ++j) {
      if (state_[j] == State::Free) free.push_back(j);
    }
    Eigen::VectorXd y(static_cast<Eigen::Index>(rows_));
    for (std::size_t i = 0; i < rows_; ++i) {
      double v = p_.y[i];
      for (std::size_t j = 0; j < n_; ++j) {
        if (state_[j] == State::Fixed) v -= out_.value[j] * p_.x[i][j];
      }
      y(static_cast<Eigen::Index>(i)) = v;
    }
    if (!free.empty()) {
      Eigen::MatrixXd m(static_cast<Eigen::Index>(rows_), static_cast<Eigen::Index>(free.size()));
      std::vector<double> scale(free.size());
      for (std::size_t k = 0; k < free.size(); ++k) {
        const Eigen::VectorXd c = merged(free[k]);
        scale[k] = c.norm() > 0 ? c.norm() : 1;
        m.col(static_cast<Eigen::Index>(k)) = c / scale[k];
      }
      const Eigen::VectorXd beta = m.colPivHouseholderQr().solve(y);
      for (std::size_t k = 0; k < free.size(); ++k) out_.value[free[k]] = beta(static_cast<Eigen::Index>(k)) / scale[k];
    }
    for (std::size_t j = 0; j < n_; ++j) {
      if (state_[j] == State::Tied) out_.value[j] = out_.value[tie_[j]];
    }
    return free;
  }

  // The free parameter furthest below its bound, relative to its column's
  // weight; -1 when none is below.
  int worst_violation(const std::vector<std::size_t>& free) const {
    int worst = -1;
    double worst_by = 0;
    for (const std::size_t j : free) {
      const Param& q = p_.params[j];
      const double v = out_.value[j];
      const bool violates = q.strictly_above ? v <= q.lower : v < q.lower;
      if (!violates) continue;
      const double by = (q.lower - v) * merged(j).norm();
      if (worst < 0 || by > worst_by) worst = static_cast<int>(j), worst_by = by;
    }
    return worst;
  }

  const Problem& p_;
  const std::size_t n_, rows_;
  std::vector<State> state_;
  std::vector<int> tie_;
  Solution out_;
};

}  // namespace

Param non_negative(std::string name, std::string why_dependent) {
  Param p;
  p.name = std::move(name);
  p.why_dependent = std::move(why_dependent);
  p.why_bounded = "bounded at 0 (fitted negative)";
  return p;
}

Solution solve(const Problem& p) {
  Solver solver(p);
  solver.settle_dependencies();
  return solver.solve_bounded();
}

double predict_row(const Problem& p, const Solution& s, std::size_t row) {
  double v = 0;
  for (std::size_t j = 0; j < p.params.size(); ++j) v += s.value[j] * p.x[row][j];
  return v;
}

Solution robust_solve(const Problem& p, bool relative) {
  const std::size_t rows = p.y.size();
  std::vector<double> w(rows, 1.0);
  const auto unit = [&](std::size_t i) { return relative && std::abs(p.y[i]) > 0 ? std::abs(p.y[i]) : 1.0; };
  Solution s;
  for (int round = 0; round < 50; ++round) {
    Problem q = p;
    for (std::size_t i = 0; i < rows; ++i) {
      const double scale = w[i] / unit(i);
      for (auto& x : q.x[i]) x *= scale;
      q.y[i] *= scale;
    }
    s = solve(q);
    std::vector<double> r(rows), a(rows);
    for (std::size_t i = 0; i < rows; ++i) {
      r[i] = (predict_row(p, s, i) - p.y[i]) / unit(i);
      a[i] = std::abs(r[i]);
    }
    const double sigma = 1.4826 * median(a);
    if (!(sigma > 1e-12)) break;
    double change = 0;
    for (std::size_t i = 0; i < rows; ++i) {
      const double next = a[i] > 1.345 * sigma ? 1.345 * sigma / a[i] : 1.0;
      change = std::max(change, std::abs(next - w[i]));
      w[i] = next;
    }
    if (change < 1e-4) break;
  }
  return s;
}

double huber_loss(double r) {
  r = std::abs(r);
  return r <= 0.05 ? 0.5 * r * r : 0.05 * (r - 0.025);
}

AffineFit fit_affine(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) {
    throw Error("fit: " + std::to_string(x.size()) + " x values but " + std::to_string(y.size()) + " y values");
  }
  if (x.size() < 2) throw Error("fit: an affine fit needs at least two points");
  Problem p;
  for (const char* name : {"intercept", "slope"}) {
    Param q;
    q.name = name;
    q.lower = -std::numeric_limits<double>::infinity();  // unbounded
    q.why_dependent = "every x is the same";
    p.params.push_back(q);
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    p.x.push_back({1.0, x[i]});
    p.y.push_back(y[i]);
  }
  const Solution s = solve(p);
  double sum_sq = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = predict_row(p, s, i) - y[i];
    sum_sq += e * e;
  }
  return {s.value[0], s.value[1], std::sqrt(sum_sq / static_cast<double>(x.size()))};
}

}  // namespace pipetwin::calibration
