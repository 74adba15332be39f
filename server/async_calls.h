// The calls CallPollers carry (server/call_pollers.h): a unary call and a
// bidirectional stream, each on raw bytes, each asking for its successor on
// its own queue as soon as it arrives. What a call does with its messages is
// the method's: `serve` for a unary call, a StreamHandler for a stream.
//
// Thread-safety: a call runs on the thread that polls its queue; the
// methods' functions must be safe to call from every poller at once.

#ifndef ENTROKV_SERVER_ASYNC_CALLS_H_
#define ENTROKV_SERVER_ASYNC_CALLS_H_

#include <functional>
#include <memory>
#include <string>

#include "grpcpp/completion_queue.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/async_stream.h"
#include "grpcpp/support/async_unary_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"
#include "server/call_pollers.h"
#include "server/stream_handler.h"

namespace entrokv::server {

// A unary method: how to ask gRPC for a call of it, and what to answer.
struct UnaryMethod {
  using Responder = grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>;
  // The generated RequestX(context, request, responder, queue, queue, tag).
  std::function<void(grpc::ServerContext*, grpc::ByteBuffer*, Responder*,
                     grpc::ServerCompletionQueue*, void*)>
      request;
  // Fills `response` (sent when OK; else the call ends with the status).
  std::function<grpc::Status(const std::string& peer, grpc::ByteBuffer* request,
                             grpc::ByteBuffer* response)>
      serve;
};

// A bidirectional stream's method: how to ask for a call, and the handler of
// a stream that arrives (null: refused, ending with `*refused`).
struct StreamMethod {
  using Stream = grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;
  std::function<void(grpc::ServerContext*, Stream*,
                     grpc::ServerCompletionQueue*, void*)>
      request;
  std::function<std::unique_ptr<StreamHandler>(const std::string& peer,
                                               grpc::Status* refused)>
      open;
};

// Ask for one call of `method` on `queue`; each call asks for the next as it
// arrives, until `live` stops. REQUIRES: `method` and `live` outlive the
// calls (they are deleted before CallPollers::Stop() returns).
void AskUnary(const UnaryMethod* method, grpc::ServerCompletionQueue* queue,
              LiveCalls* live);
void AskStream(const StreamMethod* method, grpc::ServerCompletionQueue* queue,
               LiveCalls* live);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_ASYNC_CALLS_H_
