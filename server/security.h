// Security and listening-socket helpers of entrokv-server: credentials for
// each listener (TLS, mutual TLS, a bearer token), the plaintext-TCP policy,
// unix socket permissions, and bind-failure diagnosis.
//
// Listeners and their credentials (MakeListenerCredentials):
//  - TCP with ServerSecurity::tls_cert_file set: TLS; with tls_client_ca_file
//    also set, the client must present a certificate signed by that CA.
//  - TCP without TLS: plaintext. Allowed on a loopback host; elsewhere only
//    with allow_insecure_tcp (CheckPlaintextTcpAllowed).
//  - unix: plaintext (file permissions guard it; ApplySocketPermissions).
// With a bearer token, every call on an API listener must carry the
// metadata "authorization: Bearer <token>" or ends UNAUTHENTICATED before it
// reaches any service (entrokv, reflection); grpc.health.v1 is exempt. The
// check is an AuthMetadataProcessor, which gRPC runs only for secure
// credentials, so plaintext listeners then use gRPC's "local" credentials
// (no handshake on the wire: any plaintext client connects) for unix sockets
// and loopback TCP; a token on plaintext non-loopback TCP is refused, as it
// would travel in clear.
//
// Thread-safety: the functions are thread-safe; ApplySocketPermissions and
// CheckUnixSocketFree act on the file system.

#ifndef ENTROKV_SERVER_SECURITY_H_
#define ENTROKV_SERVER_SECURITY_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/metrics.h"
#include "grpcpp/security/server_credentials.h"

namespace entrokv::server {

struct ServerSecurity {
  std::string tls_cert_file;       // PEM; with tls_key_file: TLS on TCP.
  std::string tls_key_file;        // PEM.
  std::string tls_client_ca_file;  // PEM; set: mutual TLS.
  std::string auth_token;          // Empty: no token required.
  bool allow_insecure_tcp = false;
};

// "unix:..." / "unix-abstract:...".
bool IsUnixAddress(const std::string& address);
// True for 127.0.0.0/8, ::1 and "localhost" (bracketed or not, with an
// optional "dns:"/"ipv4:"/"ipv6:" scheme). "0.0.0.0", "[::]" and other names
// are not loopback.
bool IsLoopbackHost(const std::string& host);
// The host of "host:port".
std::string HostOf(const std::string& address);

// Reads a whole file. Errors: NotFound / PermissionDenied / Internal, naming
// `what` (the flag) and the path.
absl::StatusOr<std::string> ReadSecretFile(const std::string& what,
                                           const std::string& path);
// The bearer token in `path`: its content without surrounding whitespace.
// Errors: as ReadSecretFile; InvalidArgument for an empty token.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// InvalidArgument unless `security` is usable: cert and key both or neither,
// a client CA only with them.
absl::Status ValidateSecurity(const ServerSecurity& security);
// InvalidArgument for a plaintext (no TLS) TCP address on a non-loopback
// host without allow_insecure_tcp, or with a bearer token (sent in clear).
absl::Status CheckPlaintextTcpAllowed(const std::string& address,
                                      const ServerSecurity& security);

// The credentials of an API listener on `address` (see the file comment).
// Calls the token check refuses are counted in `metrics` (when not null).
// Errors: the PEM files' read errors.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
MakeListenerCredentials(const std::string& address,
                        const ServerSecurity& security,
                        ServerMetrics* metrics = nullptr);

// "0660" -> 0660. Errors: InvalidArgument unless octal in [0, 0777].
absl::StatusOr<mode_t> ParseSocketMode(const std::string& text);
// A group name or numeric gid. Errors: NotFound for an unknown name.
absl::StatusOr<gid_t> ResolveGroup(const std::string& group);
// chmod(path, mode) and, with a group, chown(path, -1, group).
absl::Status ApplySocketPermissions(const std::string& path, mode_t mode,
                                    std::optional<gid_t> group);

// FailedPrecondition naming the address when a server already answers on
// the unix socket at `path` (gRPC would silently unlink it and orphan that
// server). OK when the path is absent or stale.
absl::Status CheckUnixSocketFree(const std::string& path);

// Why binding `address` fails, found by doing it ourselves: for a unix
// socket, its directory (missing, not a directory, not writable: owner uid
// and mode vs ours); for TCP, the errno of bind() (EADDRINUSE, EACCES,
// EADDRNOTAVAIL) or the resolver's error. Empty when no cause is found.
std::string DiagnoseBindFailure(const std::string& address);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_SECURITY_H_
