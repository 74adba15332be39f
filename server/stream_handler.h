// What a Decode or Echo stream does with its messages, apart from the
// transport that carries them (server/async_calls.h): the transport reads
// a message, hands it to OnMessage(), writes the reply it made, and reads the
// next only once that write is done, so a handler's calls never overlap.

#ifndef ENTROKV_SERVER_STREAM_HANDLER_H_
#define ENTROKV_SERVER_STREAM_HANDLER_H_

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace entrokv::server {

class StreamHandler {
 public:
  // The stream is over (the transport is done with it): releases what the
  // stream held.
  virtual ~StreamHandler() = default;

  // One message of the client's. OK: `reply` is to be written. Else the
  // stream ends with that status (the handler has let go of what it held).
  virtual grpc::Status OnMessage(grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* reply) = 0;

  // The reply of the last OnMessage() has been written.
  virtual void OnReplyWritten() {}

  // The client half-closed, or the call ended, before the next message: the
  // status the stream ends with.
  virtual grpc::Status OnReadsDone() = 0;

  // The reply could not be written (the call is broken): the status the
  // stream ends with, for the log; the client will not see it.
  virtual grpc::Status OnWriteFailed() = 0;
};

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_STREAM_HANDLER_H_
