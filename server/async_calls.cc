#include "server/async_calls.h"

#include <memory>
#include <utility>

namespace entrokv::server {
namespace {

// A unary call: its request, its answer, then it deletes itself.
class UnaryCall final : public AsyncCall {
 public:
  UnaryCall(const UnaryMethod* method, grpc::ServerCompletionQueue* queue,
            LiveCalls* live)
      : method_(method), queue_(queue), live_(live) {}
  ~UnaryCall() override { live_->Leave(); }

  void Request() {
    method_->request(&context_, &request_, &responder_, queue_,
                     &tags_[kArrived]);
  }

  void Proceed(int op, bool ok) override {
    if (op == kFinished || !ok) {  // Answered, or never arrived (shutdown).
      delete this;
      return;
    }
    AskUnary(method_, queue_, live_);
    grpc::ByteBuffer response;
    const grpc::Status status =
        method_->serve(context_.peer(), &request_, &response);
    if (status.ok()) {
      responder_.Finish(response, status, &tags_[kFinished]);
    } else {
      responder_.FinishWithError(status, &tags_[kFinished]);
    }
  }

 private:
  enum Op { kArrived, kFinished };

  const UnaryMethod* const method_;
  grpc::ServerCompletionQueue* const queue_;
  LiveCalls* const live_;
  CallTag tags_[2] = {{this, kArrived}, {this, kFinished}};
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  UnaryMethod::Responder responder_{&context_};
};

// A bidirectional stream: reads a message, hands it to the handler, writes
// the handler's reply, then reads the next. It deletes itself once its
// Finish and its done notification have both come back, or when its request
// fails (the server is shutting down: no done notification follows).
class StreamCall final : public AsyncCall {
 public:
  StreamCall(const StreamMethod* method, grpc::ServerCompletionQueue* queue,
             LiveCalls* live)
      : method_(method), queue_(queue), live_(live) {}
  ~StreamCall() override { live_->Leave(); }

  void Request() {
    context_.AsyncNotifyWhenDone(&tags_[kDone]);
    method_->request(&context_, &stream_, queue_, &tags_[kArrived]);
  }

  void Proceed(int op, bool ok) override {
    switch (op) {
      case kArrived:
        if (!ok) {  // Shutting down: the call never started.
          delete this;
          return;
        }
        AskStream(method_, queue_, live_);
        Open();
        return;
      case kRead:
        if (!ok) {
          Finish(handler_->OnReadsDone());
          return;
        }
        if (grpc::Status status = handler_->OnMessage(&request_, &reply_);
            !status.ok()) {
          Finish(status);
          return;
        }
        stream_.Write(reply_, &tags_[kWritten]);
        return;
      case kWritten:
        if (!ok) {
          Finish(handler_->OnWriteFailed());
          return;
        }
        handler_->OnReplyWritten();
        stream_.Read(&request_, &tags_[kRead]);
        return;
      case kFinished:
        handler_.reset();  // The stream's sessions are let go of now.
        finished_ = true;
        if (done_) delete this;
        return;
      case kDone:
        done_ = true;
        if (finished_) delete this;
        return;
      default:
        return;
    }
  }

 private:
  enum Op { kArrived, kRead, kWritten, kFinished, kDone, kOps };

  void Open() {
    grpc::Status refused;
    handler_ = method_->open(context_.peer(), &refused);
    if (handler_ == nullptr) {
      Finish(refused);
      return;
    }
    stream_.Read(&request_, &tags_[kRead]);
  }

  void Finish(const grpc::Status& status) {
    stream_.Finish(status, &tags_[kFinished]);
  }

  const StreamMethod* const method_;
  grpc::ServerCompletionQueue* const queue_;
  LiveCalls* const live_;
  CallTag tags_[kOps] = {{this, kArrived},
                         {this, kRead},
                         {this, kWritten},
                         {this, kFinished},
                         {this, kDone}};
  grpc::ServerContext context_;
  StreamMethod::Stream stream_{&context_};
  std::unique_ptr<StreamHandler> handler_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer reply_;
  bool finished_ = false;
  bool done_ = false;
};

}  // namespace

void AskUnary(const UnaryMethod* method, grpc::ServerCompletionQueue* queue,
              LiveCalls* live) {
  if (live->Enter()) (new UnaryCall(method, queue, live))->Request();
}

void AskStream(const StreamMethod* method, grpc::ServerCompletionQueue* queue,
               LiveCalls* live) {
  if (live->Enter()) (new StreamCall(method, queue, live))->Request();
}

}  // namespace entrokv::server
