#include "server/security.h"

#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace entrokv::server {
namespace {

constexpr char kHealthPathPrefix[] = "/grpc.health.v1.Health/";

// Compares equal-length strings without an early exit on the first
// difference (the token's length is not a secret worth hiding).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

// Checks "authorization: Bearer <token>" on every call but health checks.
class BearerTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  BearerTokenProcessor(std::string token, ServerMetrics* metrics)
      : token_(std::move(token)), metrics_(metrics) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata,
                       grpc::AuthContext* /*context*/, OutputMetadata* consumed,
                       OutputMetadata* /*response*/) override {
    auto path = auth_metadata.find(":path");
    if (path != auth_metadata.end() &&
        absl::StartsWith(
            absl::string_view(path->second.data(), path->second.size()),
            kHealthPathPrefix)) {
      return grpc::Status::OK;
    }
    auto header = auth_metadata.find("authorization");
    if (header == auth_metadata.end()) {
      return Refuse(path, auth_metadata,
                    "entrokv: missing \"authorization: Bearer <token>\" "
                    "metadata (the server runs with --auth_token_file)");
    }
    absl::string_view value(header->second.data(), header->second.size());
    if (!absl::ConsumePrefix(&value, "Bearer ") ||
        !ConstantTimeEquals(value, token_)) {
      return Refuse(path, auth_metadata, "entrokv: wrong bearer token");
    }
    consumed->insert(
        {std::string(header->first.data(), header->first.size()),
         std::string(header->second.data(), header->second.size())});
    return grpc::Status::OK;
  }

 private:
  // UNAUTHENTICATED, counted under the method's name and field
  // "authorization".
  grpc::Status Refuse(InputMetadata::const_iterator path,
                      const InputMetadata& metadata, const char* message) {
    if (metrics_ != nullptr) {
      // The path is the client's: only entrokv's own methods are named.
      absl::string_view method = "unknown";
      if (path != metadata.end()) {
        absl::string_view name(path->second.data(), path->second.size());
        if (absl::ConsumePrefix(&name, "/entrokv.v1.EntroKv/") &&
            !name.empty() && name.size() <= 32 &&
            name.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ") ==
                absl::string_view::npos) {
          method = name;
        }
      }
      metrics_->Rejected(
          method, absl::UnauthenticatedError(
                      absl::StrCat("authorization: ", message)));
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, message);
  }

  const std::string token_;
  ServerMetrics* const metrics_;
};

std::string ErrnoName(int error) {
  switch (error) {
    case EACCES:
      return "EACCES";
    case EPERM:
      return "EPERM";
    case EADDRINUSE:
      return "EADDRINUSE";
    case EADDRNOTAVAIL:
      return "EADDRNOTAVAIL";
    case ENOENT:
      return "ENOENT";
    case ENOTDIR:
      return "ENOTDIR";
    case EROFS:
      return "EROFS";
    case ENAMETOOLONG:
      return "ENAMETOOLONG";
    case EAFNOSUPPORT:
      return "EAFNOSUPPORT";
    default:
      return absl::StrCat("errno ", error);
  }
}

std::string Describe(int error) {
  return absl::StrCat(ErrnoName(error), " (", std::strerror(error), ")");
}

std::string DiagnoseUnix(const std::string& address) {
  if (absl::StartsWith(address, "unix-abstract:")) return "";
  const std::string path = address.substr(address.find(':') + 1);
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::StrCat("the socket path is ", path.size(),
                        " bytes long; a unix socket path has at most ",
                        sizeof(sockaddr_un{}.sun_path) - 1);
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  struct stat info;
  if (stat(dir.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::StrCat("ENOENT on ", dir,
                          ": the directory does not exist (create it, or "
                          "mount a volume there)");
    }
    if (error == ENOTDIR) {
      return absl::StrCat("ENOTDIR on ", dir,
                          ": a component of the path is not a directory");
    }
    return absl::StrCat(Describe(error), " on ", dir);
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::StrCat("ENOTDIR on ", dir, ": not a directory");
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    const int error = errno;
    return absl::StrFormat(
        "%s on %s: owned by uid %d gid %d mode %04o, server runs as uid %d "
        "gid %d",
        ErrnoName(error), dir, info.st_uid, info.st_gid, info.st_mode & 07777,
        getuid(), getgid());
  }
  struct stat existing;
  if (lstat(path.c_str(), &existing) == 0 && !S_ISSOCK(existing.st_mode)) {
    return absl::StrCat(path, " exists and is not a socket");
  }
  return "";
}

std::string DiagnoseTcp(const std::string& address) {
  std::string host = HostOf(address);
  for (absl::string_view scheme : {"dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(host, scheme)) host = host.substr(scheme.size());
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = address.substr(address.rfind(':') + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                                   port.c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::StrCat("cannot resolve \"", host,
                        "\": ", gai_strerror(resolved));
  }
  std::string cause;
  for (addrinfo* a = found; a != nullptr && cause.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      const int error = errno;
      cause = Describe(error);
      if (error == EADDRINUSE) {
        absl::StrAppend(&cause, ": another process listens on port ", port);
      } else if (error == EACCES) {
        absl::StrAppend(&cause, ": port ", port,
                        " is privileged (below 1024) and the server runs as "
                        "uid ",
                        getuid(), " without CAP_NET_BIND_SERVICE");
      } else if (error == EADDRNOTAVAIL) {
        absl::StrAppend(&cause, ": ", host,
                        " is not an address of this machine");
      }
    }
    close(fd);
  }
  freeaddrinfo(found);
  return cause;
}

}  // namespace

bool IsUnixAddress(const std::string& address) {
  return absl::StartsWith(address, "unix:") ||
         absl::StartsWith(address, "unix-abstract:");
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

bool IsLoopbackHost(const std::string& host_in) {
  absl::string_view host = host_in;
  for (absl::string_view scheme : {"dns:", "ipv4:", "ipv6:"}) {
    absl::ConsumePrefix(&host, scheme);
  }
  if (absl::ConsumePrefix(&host, "[")) {
    if (!absl::ConsumeSuffix(&host, "]")) return false;
  }
  const std::string lower = absl::AsciiStrToLower(host);
  if (lower == "localhost" || lower == "ip6-localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, lower.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, lower.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& what,
                                           const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message =
        absl::StrCat(what, ": cannot read ", path, ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::InternalError(message);
  }
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> content = ReadSecretFile("auth_token_file", path);
  if (!content.ok()) return content.status();
  std::string token(absl::StripAsciiWhitespace(*content));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth_token_file: ", path, " holds no token"));
  }
  return token;
}

absl::Status ValidateSecurity(const ServerSecurity& security) {
  if (security.tls_cert_file.empty() != security.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert and tls_key: give both or neither");
  }
  if (!security.tls_client_ca_file.empty() && security.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_client_ca: needs --tls_cert and --tls_key (mutual TLS is TLS)");
  }
  return absl::OkStatus();
}

absl::Status CheckPlaintextTcpAllowed(const std::string& address,
                                      const ServerSecurity& security) {
  if (IsUnixAddress(address) || !security.tls_cert_file.empty() ||
      IsLoopbackHost(HostOf(address))) {
    return absl::OkStatus();
  }
  if (!security.auth_token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen: ", address,
        " is plaintext TCP on a non-loopback address, where the bearer token "
        "would travel in clear; give --tls_cert and --tls_key"));
  }
  if (!security.allow_insecure_tcp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen: ", address,
        " is plaintext TCP on a non-loopback address: anyone who reaches it "
        "can create, list and close sessions. Give --tls_cert and --tls_key "
        "(and --tls_client_ca for mutual TLS), listen on a unix socket or "
        "loopback, or pass --allow_insecure_tcp"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
MakeListenerCredentials(const std::string& address,
                        const ServerSecurity& security,
                        ServerMetrics* metrics) {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  const bool unix_socket = IsUnixAddress(address);
  if (!unix_socket && !security.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadSecretFile("tls_cert", security.tls_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadSecretFile("tls_key", security.tls_key_file);
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back({*key, *cert});
    if (!security.tls_client_ca_file.empty()) {
      absl::StatusOr<std::string> ca =
          ReadSecretFile("tls_client_ca", security.tls_client_ca_file);
      if (!ca.ok()) return ca.status();
      options.pem_root_certs = *ca;
      options.client_certificate_request =
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    credentials = grpc::SslServerCredentials(options);
  } else if (!security.auth_token.empty()) {
    // Plaintext on the wire; "local" credentials let the token check run.
    credentials = grpc::experimental::LocalServerCredentials(
        unix_socket ? UDS : LOCAL_TCP);
  } else {
    return grpc::InsecureServerCredentials();
  }
  if (credentials == nullptr) {
    return absl::InternalError(
        absl::StrCat("listen: cannot create credentials for ", address));
  }
  if (!security.auth_token.empty()) {
    credentials->SetAuthMetadataProcessor(
        std::make_shared<BearerTokenProcessor>(security.auth_token, metrics));
  }
  return credentials;
}

absl::StatusOr<mode_t> ParseSocketMode(const std::string& text) {
  const bool octal = !text.empty() && text.size() <= 4 &&
                     text.find_first_not_of("01234567") == std::string::npos;
  const unsigned long mode = octal ? std::strtoul(text.c_str(), nullptr, 8) : 0;
  if (!octal || mode > 0777) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket_mode: \"", text, "\" is not an octal mode in [0, 0777]"));
  }
  return static_cast<mode_t>(mode);
}

absl::StatusOr<gid_t> ResolveGroup(const std::string& group) {
  uint32_t gid = 0;
  if (!group.empty() &&
      group.find_first_not_of("0123456789") == std::string::npos &&
      absl::SimpleAtoi(group, &gid)) {
    return static_cast<gid_t>(gid);
  }
  std::string buffer(16384, '\0');
  struct group entry;
  struct group* result = nullptr;
  if (getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(),
                 &result) != 0 ||
      result == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("socket_group: no group named \"", group, "\""));
  }
  return result->gr_gid;
}

absl::Status ApplySocketPermissions(const std::string& path, mode_t mode,
                                    std::optional<gid_t> group) {
  if (group.has_value() &&
      chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0) {
    const int error = errno;
    return absl::PermissionDeniedError(
        absl::StrCat("socket_group: cannot give ", path, " to gid ", *group,
                     ": ", Describe(error), " (the server's uid ", getuid(),
                     " must be root or a member of that group)"));
  }
  if (chmod(path.c_str(), mode) != 0) {
    const int error = errno;
    return absl::PermissionDeniedError(
        absl::StrFormat("socket_mode: cannot chmod %s to %04o: %s", path, mode,
                        Describe(error)));
  }
  return absl::OkStatus();
}

absl::Status CheckUnixSocketFree(const std::string& path) {
  struct stat info;
  if (lstat(path.c_str(), &info) != 0 || !S_ISSOCK(info.st_mode)) {
    return absl::OkStatus();
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return absl::OkStatus();
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return absl::OkStatus();
  const bool answered =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (answered) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot bind unix:", path,
                     ": EADDRINUSE: another server answers on this socket"));
  }
  return absl::OkStatus();
}

std::string DiagnoseBindFailure(const std::string& address) {
  return IsUnixAddress(address) ? DiagnoseUnix(address) : DiagnoseTcp(address);
}

}  // namespace entrokv::server
