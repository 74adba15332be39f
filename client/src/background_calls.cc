#include "background_calls.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/generic_stub.h"

namespace entrokv::client_internal {
namespace {

// A call started in the background and forgotten: gRPC ends it on one of its
// callback threads. There the call may drop the last reference to the
// channel, and a channel must not be destroyed on gRPC's callback thread:
// with no background poller (Debian's gRPC 1.51), the last channel to go
// shuts down the shared callback completion queue, joins its polling threads
// and deletes it, while the thread doing so is one of them and goes on
// polling the deleted queue (a crash, seen in RecoveryTest once in ~100 runs
// under load). So an ended call is buried, and deleted later on an engine's
// thread: at the next background call, or when a Client is destroyed.
struct BackgroundCall {
  virtual ~BackgroundCall() = default;
};

class Graveyard {
 public:
  static Graveyard& Get() {
    static Graveyard* graveyard = new Graveyard;  // Never destroyed.
    return *graveyard;
  }
  // On gRPC's callback thread: only moves the call.
  void Bury(BackgroundCall* call) {
    absl::MutexLock lock(&mu_);
    buried_.emplace_back(call);
  }
  // On an engine's thread: deletes the calls that have ended.
  void Sweep() {
    std::vector<std::unique_ptr<BackgroundCall>> ended;
    {
      absl::MutexLock lock(&mu_);
      ended.swap(buried_);
    }
  }

 private:
  absl::Mutex mu_;
  std::vector<std::unique_ptr<BackgroundCall>> buried_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void SweepBackgroundCalls() { Graveyard::Get().Sweep(); }

void HealthWatch::Check(const std::shared_ptr<HealthWatch>& watch,
                        const std::shared_ptr<grpc::Channel>& channel,
                        absl::Duration timeout, bool now_due) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&watch->mu_);
    if (watch->in_flight_) {
      if (now_due) watch->follow_up_ = true;
      return;
    }
    if (!now_due && now - watch->last_sent_ < kEvery) return;
    watch->in_flight_ = true;
    watch->last_sent_ = now;
  }
  Send(watch, channel, timeout, now, /*on_grpc_thread=*/false);
}

void HealthWatch::Send(const std::shared_ptr<HealthWatch>& watch,
                       const std::shared_ptr<grpc::Channel>& channel,
                       absl::Duration timeout, absl::Time now,
                       bool on_grpc_thread) {
  // Deleting ended calls may drop a channel's last reference: not on gRPC's
  // thread (see Graveyard).
  if (!on_grpc_thread) SweepBackgroundCalls();
  // grpc.health.v1.Health/Check with an empty request (the server's overall
  // health): no entrokv state is touched when it does reach a server.
  struct Call final : BackgroundCall {
    Call(std::shared_ptr<HealthWatch> watch,
         std::shared_ptr<grpc::Channel> channel, absl::Duration timeout,
         absl::Time sent)
        : watch(std::move(watch)),
          channel(channel),
          stub(std::move(channel)),
          timeout(timeout),
          sent(sent) {}
    std::shared_ptr<HealthWatch> watch;
    std::shared_ptr<grpc::Channel> channel;
    grpc::GenericStub stub;
    const absl::Duration timeout;
    const absl::Time sent;
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
  };
  auto* call = new Call(watch, channel, timeout, now);
  grpc::Slice empty("");
  call->request = grpc::ByteBuffer(&empty, 1);
  call->context.set_deadline(absl::ToChronoTime(now + timeout));
  call->stub.UnaryCall(
      &call->context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
      &call->request, &call->response, [call](grpc::Status status) {
        bool serving = status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
        if (status.ok()) {
          // HealthCheckResponse{status: SERVING}: field 1, varint 1.
          std::vector<grpc::Slice> slices;
          std::string bytes;
          if (call->response.Dump(&slices).ok()) {
            for (const grpc::Slice& slice : slices) {
              bytes.append(reinterpret_cast<const char*>(slice.begin()),
                           slice.size());
            }
          }
          serving = bytes == std::string("\x08\x01", 2);
        }
        if (call->watch->Answered(call->sent, serving)) {
          Send(call->watch, call->channel, call->timeout, absl::Now(),
               /*on_grpc_thread=*/true);
        }
        Graveyard::Get().Bury(call);
      });
}

bool HealthWatch::Answered(absl::Time sent, bool serving) {
  absl::MutexLock lock(&mu_);
  if (sent >= answered_sent_) {
    answered_sent_ = sent;
    serving_ = serving;
  }
  if (follow_up_) {
    follow_up_ = false;
    last_sent_ = absl::Now();
    return true;  // Still in flight: the follow-up.
  }
  in_flight_ = false;
  return false;
}

bool HealthWatch::ServingSince(absl::Time since) const {
  absl::MutexLock lock(&mu_);
  return serving_ && answered_sent_ >= since;
}

void CloseInBackground(std::shared_ptr<v1::EntroKv::Stub> stub,
                       const std::string& id, absl::Duration deadline) {
  SweepBackgroundCalls();
  // Owned by gRPC's callback until the call ends, then by the graveyard; it
  // keeps the stub (and so the channel) alive that long.
  struct Call final : BackgroundCall {
    std::shared_ptr<v1::EntroKv::Stub> stub;
    grpc::ClientContext context;
    v1::CloseSessionRequest request;
    v1::CloseSessionResponse response;
  };
  auto* call = new Call;
  call->stub = std::move(stub);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  call->request.set_session_id(id);
  v1::EntroKv::Stub* raw = call->stub.get();
  raw->async()->CloseSession(
      &call->context, &call->request, &call->response,
      [call](grpc::Status) { Graveyard::Get().Bury(call); });
}

}  // namespace entrokv::client_internal
