// Reusing a DecodeRequest from one message to the next, as the server's
// parse (server/raw_messages.h) and the client library's message building
// do: a stream whose messages keep their shape then allocates nothing for
// them once warm. Stateless; thread-safe on distinct requests.

#ifndef ENTROKV_PROTO_CONVERT_MESSAGE_REUSE_H_
#define ENTROKV_PROTO_CONVERT_MESSAGE_REUSE_H_

#include <cstddef>

#include "entrokv/v1/entrokv.pb.h"

namespace entrokv::proto_convert {

// Empties `request` as Clear() would, but keeps what its steps held for the
// next message: each step, as a cleared element that the next add_steps()
// or parse takes as it is; the step's Append, emptied (protobuf's own Clear()
// deletes it); and the capacity of the strings and repeated fields that
// carry vectors. Steps left over from earlier messages are kept too. A
// field keeps its capacity only while that is at most twice what it carried
// in the last message, plus 64 bytes: a prefill chunk's storage is let go at
// the next message, and so is the storage of a step the last message did not
// use. All that is kept fits in `budget` bytes of capacity: the rest is
// freed, so that a request held between messages stays within `budget` plus
// the steps' fixed size. A step taken this way has an (empty) Append where a fresh one has
// none: the wire reads both the same.
// Uses protobuf 3.21's RepeatedPtrField::AddCleared/ReleaseCleared (removed
// in later protobuf; Debian 12 ships 3.21).
void ClearForReuse(size_t budget, v1::DecodeRequest* request);

}  // namespace entrokv::proto_convert

#endif  // ENTROKV_PROTO_CONVERT_MESSAGE_REUSE_H_
