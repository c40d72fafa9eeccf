// simulate_here(): the SimGrid replay (platform, actors, backend); the child
// process that runs it is sim/process.cpp.
#include "sim/simulator.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include "schedule/error.hpp"
#include "schedule/interpreter.hpp"
#include "sim/collectives.hpp"
#include "sim/cores.hpp"
#include "sim/engine.hpp"
#include "sim/exchanges.hpp"
#include "sim/mailboxes.hpp"
#include "sim/platform.hpp"

namespace sg4 = simgrid::s4u;
namespace ps = pipetwin::schedule;

namespace pipetwin::sim {
namespace {

// A stage's collective over its data group: replica `replica` of D. With
// HSDP (G < D shards a group) a reduction is a reduce-scatter inside the
// replica's shard group, then an all-reduce of its 1/G over the D / G
// groups' same members; an all-gather stays inside the shard group.
void over_data_group(const pipetwin::models::CollectiveEntry& entry, const std::string& tag, int stage, int replica, int D,
                     int G, double bytes, int chunks, const RoundWork& work) {
  if (G >= D) return run_collective(entry, tag, stage, replica, D, bytes, chunks, work);
  run_collective(entry, tag + "/s" + std::to_string(replica / G), stage, replica % G, G, bytes, chunks, work);
  if (entry.algorithm == ps::CollectiveAlgorithm::RingAllGather) return;
  run_collective(pipetwin::models::collective(ps::CollectiveAlgorithm::RingAllReduce), tag + "/r" + std::to_string(replica % G),
                 stage, replica / G, D / G, bytes / G, 1, work);
}

class SimBackend final : public ps::Backend {
 public:
  // `messages`: the experts' all-to-alls run as messages (within sim::kMaxExchangeSends).
  SimBackend(const SimInput& in, const Mailboxes& boxes, std::vector<ps::TimedAction>& out, std::shared_ptr<Cores> cores,
             sg4::MutexPtr taking, int replica, int who, bool messages)
      : in_(in), boxes_(boxes), out_(out), replica_(replica), who_(who),
        bounded_(in.topology.kind == models::TopologyKind::SharedHost && in.topology.calibrated_sharing(in.program.num_devices())),
        cores_(std::move(cores)), taking_(std::move(taking)), exchanges_(in, replica, messages) {}

  void compute(ps::RankId r, const ps::Action& a) override {
    if (a.op == ps::Op::REDUCE_GRAD) return reduce(a);
    if (ps::is_fsdp(a.op)) return fsdp(a);
    if (a.op == ps::Op::STEP) wait_for(pending_, a.stage.value);
    if (ps::is_compute(a.op)) wait_for(unsharding_, a.stage.value);
    const auto& costs = in_.stages.at(a.stage.value);
    const double d = costs.of(a, alone_, alone_a2a_);
    alone_ = costs.of(a);
    alone_a2a_ = std::min(alone_, costs.a2a_share(a.op));
    if (starts_buckets(r, a)) start_buckets(a, d);
    if (!cores_ || d <= 0) {
      const double start = sg4::Engine::get_clock();
      const double waits = d > 0 ? collective_wait(a, d) : 0;
      if (a.overlapped && exchanges_.pairing()) {  // an OVERLAP_F_B's second half, its all-to-alls as messages
        out_.push_back(exchanges_.close(a, d));
        return;
      }
      const auto& actions = in_.program.ranks.at(r.value);
      if (out_.size() + 1 < actions.size() && exchanges_.opens_pair(a, actions[out_.size() + 1])) {
        out_.push_back(exchanges_.open(a, actions[out_.size() + 1]));
        return;
      }
      if (exchanges_.count(costs, a.op) > 0 && d > 0) {
        exchanges_.inline_run(a, d, [this](double seconds) { run(seconds); });
      } else if (d > waits) {
        run(d - waits);
      }
      if (waits > 0) sg4::this_actor::sleep_for(waits);
      out_.push_back({a, start, sg4::Engine::get_clock()});
      if (a.op == ps::Op::STEP) gather(a);
      return;
    }
    // Run to completion: a rank takes a core when it has work and keeps it
    // until it receives a message (recv()); with a time slice, it gives the core up
    // to the first waiting rank (the semaphore wakes its waiters in order)
    // each slice, inside its action: round robin. Waiting for a core before
    // the action is idle, as a woken rank's wait for a core inside its
    // receive is on a real host; waiting after a slice is part of the action,
    // as an action's wall time holds its preemptions.
    // With wake preemption, a rank woken by a message takes a core from a
    // running one within wake_preempt_s (the running ones look that often,
    // a rank that has just taken its core runs one look first); the one it
    // preempts queues again behind the woken ones.
    take_core(true);
    const double start = sg4::Engine::get_clock();
    const double slice = in_.topology.time_slice_s, look = in_.topology.wake_preempt_s;
    const double waits = collective_wait(a, d);
    for (double left = d - waits; left > 1e-12 * d;) {
      const bool sliced = slice > 0 && used_ >= slice * (1 - 1e-12);
      if (sliced || (look > 0 && used_ > 0 && cores_->woken_waiting(held_.front()))) {
        give_core(false);
        take_core(false);
      }
      double chunk = slice > 0 ? std::min(left, slice - used_) : left;
      if (look > 0) chunk = std::min(chunk, look);
      run(chunk);
      used_ += chunk;
      left -= chunk;
    }
    if (waits > 0) {  // the tensor group's collectives: a wait, its cores free meanwhile
      give_core();
      sg4::this_actor::sleep_for(waits);
    }
    out_.push_back({a, start, sg4::Engine::get_clock()});
    if (a.op == ps::Op::STEP) gather(a);
  }

  // REDUCE_GRAD: the stage's gradients all-reduced over its data group (with
  // ZeRO-1, reduce-scattered) by an actor of its own, from now on, while the
  // rank goes on; the stage's STEP waits for it. Its timed action ends when
  // this replica's part of the collective (the stage costs' choice) does.
  void reduce(const ps::Action& a) {
    const int D = in_.program.data_parallel, G = in_.program.shard_degree(), s = a.stage.value;
    if (const auto it = early_.find(s); it != early_.end()) {  // bucketed: started with the backward
      const auto state = it->second;
      early_.erase(it);
      out_.push_back({a, state->start, state->done >= 0 ? state->done : sg4::Engine::get_clock()});
      if (state->done < 0) state->at = static_cast<long>(out_.size()) - 1;
      return;
    }
    const ps::StageCosts& costs = in_.stages.at(s);
    // Each of the group's T devices reduces its own share over its own link:
    // the group's merged route carries T shares (Topology::route_group).
    const double bytes = costs.reduce_bytes * in_.program.tensor_parallel;
    out_.push_back({a, sg4::Engine::get_clock(), sg4::Engine::get_clock()});
    if (D <= 1 || bytes <= 0) return;
    const std::size_t at = out_.size() - 1;
    const auto& entry = models::collective(in_.program.shard_optimizer() ? ps::CollectiveAlgorithm::RingReduceScatter
                                                                      : costs.reduce_collective);
    const int chunks = costs.reduce_chunks;
    auto& out = out_;
    const int replica = replica_;
    pending_[s] = collective("reduce" + std::to_string(s) + "/" + std::to_string(replica),
                             [&out, &entry, at, s, replica, D, G, chunks, bytes](const RoundWork& work) {
                               over_data_group(entry, "R", s, replica, D, G, bytes, chunks, work);
                               out[at].end = sg4::Engine::get_clock();
                             });
  }
  // UNSHARD: the stage's weights all-gathered over its shard group by an
  // actor of its own, from now on (FSDP's unshard(async_op=True)); the
  // stage's next compute waits for it (PyTorch's _assert_unsharded). Its
  // timed action ends when the gather does. RESHARD frees: no time. Both are
  // no-ops where the stage's weights are not kept between uses
  // (StageCosts::unshard_bytes 0).
  void fsdp(const ps::Action& a) {
    const int D = in_.program.data_parallel, G = in_.program.shard_degree(), s = a.stage.value;
    const double bytes = in_.stages.at(s).unshard_bytes * in_.program.tensor_parallel;  // T shares, as reduce()
    out_.push_back({a, sg4::Engine::get_clock(), sg4::Engine::get_clock()});
    if (a.op != ps::Op::UNSHARD || D <= 1 || bytes <= 0) return;
    const std::size_t at = out_.size() - 1;
    const auto& entry = models::collective(ps::CollectiveAlgorithm::RingAllGather);
    auto& out = out_;
    const int replica = replica_;
    unsharding_[s] = collective("unshard" + std::to_string(s) + "/" + std::to_string(replica),
                                [&out, &entry, at, s, replica, D, G, bytes](const RoundWork& work) {
                                  over_data_group(entry, "U", s, replica, D, G, bytes, 1, work);
                                  out[at].end = sg4::Engine::get_clock();
                                });
  }
  // Bucketed reductions (StageCosts::reduce_bucket_bytes): the backward
  // right before a stage's REDUCE_GRAD on this rank starts them; under
  // ZeRO-2 and 3 (reduce_each_microbatch) every backward of the stage does.
  bool starts_buckets(ps::RankId r, const ps::Action& a) {
    if (in_.program.data_parallel <= 1 || (a.op != ps::Op::B && a.op != ps::Op::W)) return false;
    if (in_.stages.at(a.stage.value).reduce_each_microbatch) return true;
    if (!scanned_) {
      scanned_ = true;
      const auto& actions = in_.program.ranks.at(r.value);
      for (std::size_t i = 0; i < actions.size(); ++i) {
        const auto& g = actions[i];
        const auto& costs = in_.stages.at(g.stage.value);
        if (g.op != ps::Op::REDUCE_GRAD || models::gradient_buckets(costs.reduce_bytes, costs.reduce_bucket_bytes, costs.reduce_first_bucket_bytes).size() < 2) {
          continue;
        }
        if (const auto k = ps::backward_before(actions, i)) {
          const auto& b = actions[*k];
          leads_.insert(std::array<int, 3>{static_cast<int>(b.op), b.stage.value, b.microbatch ? b.microbatch->value : -1});
        }
      }
    }
    return leads_.count(std::array<int, 3>{static_cast<int>(a.op), a.stage.value, a.microbatch ? a.microbatch->value : -1}) > 0;
  }
  // From now on, while the backward (`backward_s`) runs: each bucket reduced
  // in turn from when the backward has produced it (models::gradient_buckets),
  // after the stage's reductions started before (one after the other).
  void start_buckets(const ps::Action& a, double backward_s) {
    const int D = in_.program.data_parallel, G = in_.program.shard_degree(), s = a.stage.value, replica = replica_;
    const ps::StageCosts& costs = in_.stages.at(s);
    const auto buckets = models::gradient_buckets(costs.reduce_bytes, costs.reduce_bucket_bytes, costs.reduce_first_bucket_bytes);
    const auto& entry = models::collective(in_.program.shard_optimizer() ? ps::CollectiveAlgorithm::RingReduceScatter
                                                                      : costs.reduce_collective);
    const double T = in_.program.tensor_parallel, total = costs.reduce_bytes, chunks = costs.reduce_chunks;
    auto state = std::make_shared<Early>();
    state->start = sg4::Engine::get_clock();
    auto& out = out_;
    sg4::ActorPtr before;
    if (const auto it = pending_.find(s); it != pending_.end()) before = it->second;
    pending_[s] = collective("reduce" + std::to_string(s) + "/" + std::to_string(replica),
                             [&out, &entry, state, buckets, backward_s, s, replica, D, G, T, total, chunks, before](const RoundWork& work) {
                               if (before) before->join();
                               for (const auto& b : buckets) {
                                 const double ready = state->start + b.ready * backward_s;
                                 if (ready > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(ready);
                                 over_data_group(entry, "R", s, replica, D, G, b.bytes * T,
                                                 models::bucket_chunks(chunks, b.bytes, total), work);
                               }
                               state->done = sg4::Engine::get_clock();
                               if (state->at >= 0) out[state->at].end = state->done;
                             });
    early_[s] = state;
  }
  // An actor running `body`, a collective: on a shared host with calibrated
  // collectives, on their host (its link), its rounds' work on the cores of
  // this rank's host; elsewhere on this rank's host, its bytes on the routes.
  sg4::ActorPtr collective(const std::string& name, std::function<void(const RoundWork&)> body) {
    sg4::Host* own = sg4::Host::by_name_or_null(kCollectivesHost);
    sg4::Host* ranks = sg4::this_actor::get_host();
    const RoundWork work = own != nullptr ? RoundWork{ranks, 1 / in_.topology.collective.bandwidth} : RoundWork{};
    return sg4::Actor::create(name, own != nullptr ? own : ranks, [body = std::move(body), work] { body(work); });
  }
  // The stage's actor in `in_flight` (its reduction, or its UNSHARD's
  // gather), if any, waited for and forgotten.
  void wait_for(std::map<int, sg4::ActorPtr>& in_flight, int stage) {
    const auto it = in_flight.find(stage);
    if (it == in_flight.end()) return;
    give_core();  // it waits: its core goes to a rank that has work
    it->second->join();
    in_flight.erase(it);
  }
  // ZeRO-1: after its step on its shard, each device all-gathers the updated weights (in STEP's time).
  void gather(const ps::Action& a) {
    const int D = in_.program.data_parallel, G = in_.program.shard_degree(), s = a.stage.value;
    const double bytes = in_.stages.at(s).gather_bytes * in_.program.tensor_parallel;  // T shares, as reduce()
    if (D <= 1 || bytes <= 0) return;
    give_core();  // a ring waits for its peers: no core held meanwhile
    const int replica = replica_;
    const auto& entry = models::collective(ps::CollectiveAlgorithm::RingAllGather);
    collective("gather" + std::to_string(s) + "/" + std::to_string(replica),
               [&entry, s, replica, D, G, bytes](const RoundWork& work) {
                 over_data_group(entry, "AG", s, replica, D, G, bytes, 1, work);
               })
        ->join();
    out_.back().end = sg4::Engine::get_clock();
  }

  // The rank's last action is done: its core is free.
  void finish() { give_core(); }

  // Of action `a` (taking `d`), the tensor group's collectives on a shared
  // host: spent waiting, not computing (with run to completion, not holding
  // the cores either).
  double collective_wait(const ps::Action& a, double d) const {
    if (in_.topology.kind != models::TopologyKind::SharedHost || in_.program.tensor_parallel <= 1) return 0;
    return std::clamp(in_.stages.at(a.stage.value).tp_share(a.op), 0.0, d);
  }
  // A rank's cores: one, or on a shared host its tensor group's T (each
  // member a process), taken at once (one group at a time takes them, so
  // that two groups never hold part of what each needs).
  int width() const {
    return in_.topology.kind == models::TopologyKind::SharedHost ? std::min(in_.program.tensor_parallel, in_.topology.host_cores)
                                                                 : 1;
  }
  // `woken`: it gave its core up to wait for a message (with wake
  // preemption, such ranks go first); else it was preempted.
  void take_core(bool woken) {
    if (!holding_) {
      if (width() > 1) taking_->lock();
      for (int i = 0; i < width(); ++i) held_.push_back(cores_->take(who_, woken && in_.topology.wake_preempt_s > 0));
      if (width() > 1) taking_->unlock();
      holding_ = true;
      used_ = 0;
    }
  }
  // `blocking`: it waits for something (a message, its peers); else it was
  // preempted (with affinity, its core goes only to a rank queued on it).
  void give_core(bool blocking = true) {
    if (holding_) {
      for (const int core : held_) cores_->give(core, blocking);
      held_.clear();
      holding_ = false;
    }
  }

  // `seconds` of one member's work: on a shared host each of the tensor
  // group's T members runs it on a core of its own, at once.
  void run(double seconds) const {
    const int members = in_.topology.kind == models::TopologyKind::SharedHost ? in_.program.tensor_parallel : 1;
    if (members > 1) {
      std::vector<sg4::ExecPtr> execs;
      for (int i = 0; i < members; ++i) {
        execs.push_back(sg4::this_actor::exec_init(seconds * kSpeed)->set_bound(kSpeed)->start());
      }
      for (auto& e : execs) e->wait();
    } else if (bounded_) {
      sg4::this_actor::exec_init(seconds * kSpeed)->set_bound(kSpeed)->start()->wait();
    } else {
      sg4::this_actor::execute(seconds * kSpeed);
    }
  }

  void send(ps::RankId, const ps::Action& a, ps::RankId) override {
    const ps::StageCosts& t = in_.stages.at(a.stage.value);
    const double bytes = a.op == ps::Op::SEND_F ? t.activation_bytes : t.gradient_bytes;
    const double start = sg4::Engine::get_clock();
    if (t.send_s(a.op) > 0) sg4::this_actor::sleep_for(t.send_s(a.op));
    static int payload = 0;
    if (t.blocking_sends) {
      if (cores_) give_core();  // it waits: its core goes to a rank that has work
      boxes_.of(a)->put(&payload, static_cast<uint64_t>(bytes));  // waits for the flight
    } else {
      boxes_.of(a)->put_init(&payload, static_cast<uint64_t>(bytes))->detach();
    }
    out_.push_back({a, start, sg4::Engine::get_clock()});
  }

  bool recv(ps::RankId, const ps::Action& a, ps::RankId) override {
    const double start = sg4::Engine::get_clock();
    // It waits, even for a message already sent: a receive blocks until the
    // transport's thread (which needs a core too) hands the message over, so
    // its core goes to a rank that has work, and it queues for one again.
    if (cores_) give_core();
    boxes_.of(a)->get<int>();
    const ps::StageCosts& t = in_.stages.at(a.stage.value);
    const double take = a.op == ps::Op::RECV_F ? t.activation_recv_s : t.gradient_recv_s;
    // As the evaluator: max(start + take, arrival + wake).
    const double arrived = sg4::Engine::get_clock();
    const double until = std::max(start + take, arrived + t.recv_wake_s);
    if (until > arrived) sg4::this_actor::sleep_for(until - arrived);
    out_.push_back({a, start, sg4::Engine::get_clock()});
    return true;
  }

 private:
  const SimInput& in_;
  const Mailboxes& boxes_;
  std::vector<ps::TimedAction>& out_;
  int replica_ = 0;
  int who_ = 0;  // of the host's ranks (Cores::take)
  std::vector<int> held_;  // the cores it holds
  std::map<int, sg4::ActorPtr> pending_;  // stage -> its reduction in flight
  // A bucketed reduction started with its backward: when, when it ended (-1:
  // not yet), and its REDUCE_GRAD's place in out_ once timed (-1: not yet).
  struct Early {
    double start = 0, done = -1;
    long at = -1;
  };
  std::map<int, std::shared_ptr<Early>> early_;  // stage -> its bucketed reduction, until its REDUCE_GRAD
  std::map<int, sg4::ActorPtr> unsharding_;      // stage -> its UNSHARD's gather, until the stage computes
  std::set<std::array<int, 3>> leads_;           // (op, stage, micro-batch) of the backwards that start them
  bool scanned_ = false;
  bool bounded_;  // each exec at most one core (a host of calibrated effective cores)
  std::shared_ptr<Cores> cores_;  // run to completion: the host's cores; null otherwise
  sg4::MutexPtr taking_;     // with cores_: one tensor group at a time takes its cores
  bool holding_ = false;     // this rank holds one of them
  double used_ = 0;          // of its time slice
  double alone_ = 0;         // its last compute action's own time (what an overlapped one overlaps)
  double alone_a2a_ = 0;     // and of it its all-to-alls
  ExpertExchanges exchanges_;
};

}  // namespace

ps::Timeline simulate_here(const SimInput& in) {
  const ps::Program& p = in.program;
  if (static_cast<int>(in.stages.size()) != p.num_stages()) {
    throw Error("simulation: " + std::to_string(in.stages.size()) + " stage costs for " + std::to_string(p.num_stages()) +
                " stages");
  }
  // PIPETWIN_SIM_LOG set: SimGrid's stderr is kept; a value that is a SimGrid
  // log control string (e.g. root.thres:warning) sets its thresholds too.
  const char* log = std::getenv("PIPETWIN_SIM_LOG");
  xbt_log_control_set(log != nullptr && std::string(log).find(':') != std::string::npos ? log : "root.thres:critical");
  int argc = 1;
  char name[] = "pipetwin-sim";
  char* argv[] = {name, nullptr};
  sg4::Engine engine(&argc, argv);
  configure(engine, in);
  // PIPETWIN_SIM_PROFILE=FILE: where the replay's time goes, appended to FILE.
  const char* profile = std::getenv("PIPETWIN_SIM_PROFILE");
  const auto t0 = std::chrono::steady_clock::now();
  const auto hosts = build_platform(in.topology, p);
  const auto t1 = std::chrono::steady_clock::now();
  const int D = p.data_parallel, K = p.num_ranks;

  // One actor per pipeline rank of each data-parallel replica (a tensor-
  // parallel group moves as one: its collectives are in its actions' times).
  std::vector<ps::Timeline> replicas(D);
  const auto& topo = in.topology;
  const auto cores = topo.kind == models::TopologyKind::SharedHost && topo.run_to_completion && p.num_devices() > topo.host_cores
                         // A tensor group takes its T cores at once: from one queue.
                         ? std::make_shared<Cores>(topo.host_cores, topo.core_affinity && p.tensor_parallel == 1)
                         : nullptr;
  const sg4::MutexPtr taking = sg4::Mutex::create();
  std::vector<std::unique_ptr<Mailboxes>> boxes;
  for (int d = 0; d < D; ++d) {
    boxes.push_back(std::make_unique<Mailboxes>(p, d));
    replicas[d].ranks.resize(K);
  }
  // Counted once: the experts' all-to-alls as messages, within the budget.
  const bool messages = exchange_sends(p, in.stages, in.topology) <= kMaxExchangeSends;
  for (int d = 0; d < D; ++d) {
    for (int r = 0; r < K; ++r) {
      const std::string name = D == 1 ? "rank" + std::to_string(r) : "rank" + std::to_string(r) + "/d" + std::to_string(d);
      sg4::Actor::create(name, hosts[d + D * r], [&in, &boxes, &replicas, r, d, K, cores, taking, messages] {
        const Mailboxes& mine = *boxes[d];
        // Receive eagerly: every incoming mailbox delivers to this rank as soon as data is sent.
        for (const auto& a : in.program.ranks[r]) {
          if (ps::is_recv(a.op)) mine.of(a)->set_receiver(sg4::Actor::self());
        }
        SimBackend backend(in, mine, replicas[d].ranks[r], cores, taking, d, d * K + r, messages);
        ps::RankInterpreter interpreter(in.program, ps::RankId{r});
        while (interpreter.step(backend) == ps::RankInterpreter::Status::Progressed) {
        }
        backend.finish();
      });
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  engine.run();
  if (profile) {
    write_profile(profile, p, {t0, t1, t2, std::chrono::steady_clock::now()}, hosts.size(), engine.get_link_count());
  }
  std::string blocked;
  for (int d = 0; d < D; ++d) {
    for (int r = 0; r < K; ++r) {
      const std::size_t done = replicas[d].ranks[r].size(), total = p.ranks[r].size();
      if (done < total) {
        blocked += "\n  rank " + std::to_string(r) + (D > 1 ? " of replica " + std::to_string(d) : "") + ", step " +
                   std::to_string(done) + " (" + ps::to_string(p.ranks[r][done]) + ") never completed";
      }
    }
  }
  if (!blocked.empty()) throw Error("simulation: deadlock, no rank can make progress" + blocked);
  // The replicas run the same actions; the network may delay one more than
  // another: the step is the slowest one's, and its timeline the answer.
  std::size_t slowest = 0;
  for (std::size_t d = 1; d < replicas.size(); ++d) {
    if (replicas[d].makespan() > replicas[slowest].makespan()) slowest = d;
  }
  return std::move(replicas[slowest]);
}

}  // namespace pipetwin::sim
