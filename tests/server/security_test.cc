// Security by default (issue #11): TLS, mutual TLS and the bearer token on
// the API listeners, the health-only port, unix socket permissions, the
// plaintext-TCP policy, bind-failure diagnosis and JSON log lines. The server
// runs in process; the certificates are made with the openssl CLI at test
// time (a CA, a server certificate for localhost/127.0.0.1, a client
// certificate, and a second CA with its own client certificate).

#include "server/security.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "entrokv/client/vectors.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/sync_stream.h"
#include "gtest/gtest.h"
#include "server/log_format.h"
#include "server_test_util.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Throwaway certificates in a temporary directory, made once per process.
class Certificates {
 public:
  static const Certificates& Get() {
    static const Certificates* certs = new Certificates();
    return *certs;
  }
  bool ok() const { return ok_; }
  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }

 private:
  Certificates() {
    char tmpl[] = "/tmp/entrokv-certs-XXXXXX";
    dir_ = mkdtemp(tmpl);
    WriteFile(Path("openssl.cnf"),
              "[req]\ndistinguished_name=dn\n[dn]\n"
              "[ca]\nbasicConstraints=critical,CA:TRUE\n"
              "keyUsage=critical,keyCertSign,cRLSign\n"
              "subjectKeyIdentifier=hash\n"
              "[server]\nbasicConstraints=CA:FALSE\n"
              "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
              "extendedKeyUsage=serverAuth\n"
              "[client]\nbasicConstraints=CA:FALSE\n"
              "extendedKeyUsage=clientAuth\n");
    const std::string d = dir_;
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
    auto ca = [&](const std::string& name) {
      return absl::StrCat("openssl req -x509 ", key, " -nodes -days 2 -config ",
                          d, "/openssl.cnf -extensions ca -subj /CN=", name,
                          " -keyout ", d, "/", name, ".key -out ", d, "/", name,
                          ".pem");
    };
    auto leaf = [&](const std::string& name, const std::string& ca_name,
                    const std::string& kind) {
      return absl::StrCat(
          "openssl req -new ", key, " -nodes -config ", d,
          "/openssl.cnf -subj /CN=", name, " -keyout ", d, "/", name,
          ".key -out ", d, "/", name, ".csr && openssl x509 -req -days 2 -in ",
          d, "/", name, ".csr -CA ", d, "/", ca_name, ".pem -CAkey ", d, "/",
          ca_name, ".key -set_serial 0x", std::hash<std::string>()(name),
          " -extfile ", d, "/openssl.cnf -extensions ", kind, " -out ", d, "/",
          name, ".pem");
    };
    const std::string script = absl::StrCat(
        "set -e; (", ca("ca"), " && ", ca("other-ca"), " && ",
        leaf("server", "ca", "server"), " && ", leaf("client", "ca", "client"),
        " && ", leaf("other-client", "other-ca", "client"), ") >", d,
        "/openssl.log 2>&1");
    ok_ = std::system(script.c_str()) == 0;
    if (!ok_) std::fprintf(stderr, "%s\n", Slurp(Path("openssl.log")).c_str());
  }

  std::string dir_;
  bool ok_ = false;
};

std::string UniqueSocket(const std::string& tag) {
  return absl::StrCat("/tmp/entrokv-sec-", getpid(), "-", tag, ".sock");
}

// grpc.health.v1's HealthCheckResponse.ServingStatus values.
constexpr int kServing = 1;
constexpr int kNotServing = 2;

// grpc.health.v1 Check of `service` on `target`, plaintext, no token.
absl::StatusOr<int> HealthCheck(const std::string& target,
                                const std::string& service = "") {
  auto channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  // HealthCheckRequest { string service = 1; } by hand.
  std::string wire;
  if (!service.empty()) {
    wire = absl::StrCat(std::string(1, '\x0a'),
                        std::string(1, static_cast<char>(service.size())),
                        service);
  }
  grpc::Slice slice(wire);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  const grpc::Status status = grpc::internal::BlockingUnaryCall(
      channel.get(),
      grpc::internal::RpcMethod("/grpc.health.v1.Health/Check",
                                grpc::internal::RpcMethod::NORMAL_RPC),
      &context, request, &response);
  if (!status.ok()) return ToAbsl(status);
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse { ServingStatus status = 1; }: absent means 0.
  if (bytes.size() == 2 && bytes[0] == '\x08') {
    return static_cast<int>(bytes[1]);
  }
  return 0;
}

// The serving status, or -1 when the check failed (printed).
int StatusOrDie(const absl::StatusOr<int>& status) {
  if (!status.ok()) {
    ADD_FAILURE() << status.status();
    return -1;
  }
  return *status;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Certificates::Get().ok()) << "openssl could not make certs";
  }
  void TearDown() override { server_.reset(); }

  const Certificates& certs() { return Certificates::Get(); }

  ServerOptions TlsOptions(bool mutual) {
    ServerOptions options = TestServerOptions();
    options.listen = {"127.0.0.1:0"};
    options.tls_cert_file = certs().Path("server.pem");
    options.tls_key_file = certs().Path("server.key");
    if (mutual) options.tls_client_ca_file = certs().Path("ca.pem");
    return options;
  }

  std::string TokenFile(const std::string& token) {
    const std::string path = UniqueSocket("token") + ".txt";
    WriteFile(path, token + "\n");
    return path;
  }

  void Start(const ServerOptions& options) {
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // A client of the real library on the server's first target.
  std::unique_ptr<Client> Connect(ClientOptions options) {
    options.target = server_->targets()[0];
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Creates a session (no fail-open) and runs one step on it.
  absl::Status CreateAndStep(Client* client) {
    SessionOptions options;
    options.offline_when_unavailable = false;
    options.create_deadline = absl::Seconds(5);
    options.step_deadline = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<Session>> session =
        client->CreateSession(WindowConfig(4), options);
    if (!session.ok()) return session.status();
    const Shape shape = SmallShape();
    const std::vector<float> keys(
        shape.layers * shape.kv_heads * shape.head_dim, 0.5f);
    const std::vector<float> queries(
        shape.layers * shape.q_heads * shape.head_dim, 0.25f);
    const uint64_t slot = 1;
    StepRequest request;
    request.slot_ids = absl::MakeConstSpan(&slot, 1);
    request.keys = VectorView::F32(keys);
    request.queries = VectorView::F32(queries);
    absl::StatusOr<StepOutcome> outcome = (*session)->Step(request);
    if (!outcome.ok()) return outcome.status();
    if (outcome->fallback) return absl::UnavailableError("step fell back");
    return (*session)->Close();
  }

  std::unique_ptr<Server> server_;
};

TEST_F(SecurityTest, TlsServerRefusesPlaintextClient) {
  Start(TlsOptions(/*mutual=*/false));
  std::unique_ptr<Client> client = Connect({});
  ASSERT_NE(client, nullptr);
  EXPECT_STATUS_CODE(CreateAndStep(client.get()),
                     absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, TlsServerServesClientThatTrustsItsCa) {
  Start(TlsOptions(/*mutual=*/false));
  ClientOptions options;
  options.tls_root_certs_file = certs().Path("ca.pem");
  std::unique_ptr<Client> client = Connect(options);
  ASSERT_NE(client, nullptr);
  EXPECT_OK(CreateAndStep(client.get()));
}

TEST_F(SecurityTest, TlsClientRefusesServerOfAnotherCa) {
  Start(TlsOptions(/*mutual=*/false));
  ClientOptions options;
  options.tls_root_certs_file = certs().Path("other-ca.pem");
  std::unique_ptr<Client> client = Connect(options);
  ASSERT_NE(client, nullptr);
  EXPECT_STATUS_CODE(CreateAndStep(client.get()),
                     absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsRefusesClientWithoutCertificate) {
  Start(TlsOptions(/*mutual=*/true));
  ClientOptions options;
  options.tls_root_certs_file = certs().Path("ca.pem");
  std::unique_ptr<Client> client = Connect(options);
  ASSERT_NE(client, nullptr);
  EXPECT_STATUS_CODE(CreateAndStep(client.get()),
                     absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsRefusesCertificateOfAnotherCa) {
  Start(TlsOptions(/*mutual=*/true));
  ClientOptions options;
  options.tls_root_certs_file = certs().Path("ca.pem");
  options.tls_cert_file = certs().Path("other-client.pem");
  options.tls_key_file = certs().Path("other-client.key");
  std::unique_ptr<Client> client = Connect(options);
  ASSERT_NE(client, nullptr);
  EXPECT_STATUS_CODE(CreateAndStep(client.get()),
                     absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsServesClientWithCertificateOfItsCa) {
  Start(TlsOptions(/*mutual=*/true));
  ClientOptions options;
  options.tls_root_certs_file = certs().Path("ca.pem");
  options.tls_cert_file = certs().Path("client.pem");
  options.tls_key_file = certs().Path("client.key");
  std::unique_ptr<Client> client = Connect(options);
  ASSERT_NE(client, nullptr);
  EXPECT_OK(CreateAndStep(client.get()));
}

// The token on a plaintext unix socket: every API call needs it, the unary
// ones and the Decode stream alike; health checks do not.
TEST_F(SecurityTest, TokenOnUnixSocketRefusesMissingOrWrongToken) {
  ServerOptions options = TestServerOptions();
  const std::string socket = UniqueSocket("token");
  options.listen = {absl::StrCat("unix:", socket)};
  const std::string token_file = TokenFile("s3cret-token");
  options.auth_token_file = token_file;
  Start(options);

  for (const std::string& token : {std::string(), std::string("wrong")}) {
    SCOPED_TRACE(absl::StrCat("token \"", token, "\""));
    ClientOptions client_options;
    client_options.bearer_token = token;
    std::unique_ptr<Client> client = Connect(client_options);
    ASSERT_NE(client, nullptr);
    EXPECT_STATUS_CODE(CreateAndStep(client.get()),
                       absl::StatusCode::kUnauthenticated);
    EXPECT_STATUS_CODE(client->ListSessions(),
                       absl::StatusCode::kUnauthenticated);
  }
  // The Decode stream, without the client library.
  auto channel = grpc::CreateChannel(server_->targets()[0],
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::EntroKv::NewStub(channel);
  DecodeStream stream(stub.get());
  EXPECT_STATUS_CODE(stream.RoundTrip(v1::DecodeRequest()),
                     absl::StatusCode::kUnauthenticated);
  // Health needs no token.
  EXPECT_EQ(StatusOrDie(HealthCheck(server_->targets()[0])), kServing);

  ClientOptions good;
  good.bearer_token = "s3cret-token";
  std::unique_ptr<Client> client = Connect(good);
  ASSERT_NE(client, nullptr);
  EXPECT_OK(CreateAndStep(client.get()));
  EXPECT_OK(client->ListSessions().status());
  // A call on a path of the client's making is refused and counted under
  // method "unknown", not under its path.
  {
    grpc::GenericStub generic(channel);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, "/made.Up/Path", grpc::StubOptions(),
                      &request, &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  // Each refusal is counted: two CreateSession, two ListSessions, one Decode.
  const std::string metrics = server_->MetricsText();
  EXPECT_THAT(metrics,
              ::testing::HasSubstr(
                  "entrokv_rejected_total{method=\"unknown\",code=\""
                  "UNAUTHENTICATED\",field=\"authorization\"} 1\n"));
  EXPECT_THAT(metrics, ::testing::Not(::testing::HasSubstr("made.Up")));
  for (const auto& [method, count] :
       {std::pair<const char*, int>{"CreateSession", 2},
        {"ListSessions", 2},
        {"Decode", 1}}) {
    EXPECT_THAT(metrics,
                ::testing::HasSubstr(absl::StrCat(
                    "entrokv_rejected_total{method=\"", method,
                    "\",code=\"UNAUTHENTICATED\",field=\"authorization\"} ",
                    count, "\n")))
        << metrics;
  }
  unlink(token_file.c_str());
}

TEST_F(SecurityTest, TokenWithMutualTls) {
  ServerOptions options = TlsOptions(/*mutual=*/true);
  const std::string token_file = TokenFile("tls-token");
  options.auth_token_file = token_file;
  Start(options);
  ClientOptions client_options;
  client_options.tls_root_certs_file = certs().Path("ca.pem");
  client_options.tls_cert_file = certs().Path("client.pem");
  client_options.tls_key_file = certs().Path("client.key");
  {
    std::unique_ptr<Client> client = Connect(client_options);
    ASSERT_NE(client, nullptr);
    EXPECT_STATUS_CODE(CreateAndStep(client.get()),
                       absl::StatusCode::kUnauthenticated);
  }
  client_options.bearer_token = "tls-token";
  std::unique_ptr<Client> client = Connect(client_options);
  ASSERT_NE(client, nullptr);
  EXPECT_OK(CreateAndStep(client.get()));
  unlink(token_file.c_str());
}

// A bidi call on `method` that sends nothing; its final status.
grpc::Status EmptyStreamCall(grpc::Channel* channel, const char* method) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
      stream(grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer,
                                                       grpc::ByteBuffer>::
                 Create(channel,
                        grpc::internal::RpcMethod(
                            method, grpc::internal::RpcMethod::BIDI_STREAMING),
                        &context));
  stream->WritesDone();
  grpc::ByteBuffer ignored;
  while (stream->Read(&ignored)) {
  }
  return stream->Finish();
}

constexpr char kReflection[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
constexpr char kReflectionV1[] =
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";

TEST_F(SecurityTest, ReflectionIsOffByDefaultAndBehindTheTokenWhenOn) {
  {
    Start(TestServerOptions());
    auto channel = grpc::CreateChannel(server_->targets()[0],
                                       grpc::InsecureChannelCredentials());
    EXPECT_EQ(EmptyStreamCall(channel.get(), kReflection).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_EQ(EmptyStreamCall(channel.get(), kReflectionV1).error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
    server_.reset();
  }
  ServerOptions options = TestServerOptions();
  options.enable_reflection = true;
  const std::string token_file = TokenFile("reflect");
  options.auth_token_file = token_file;
  Start(options);
  auto channel = grpc::CreateChannel(server_->targets()[0],
                                     grpc::InsecureChannelCredentials());
  EXPECT_EQ(EmptyStreamCall(channel.get(), kReflection).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(EmptyStreamCall(channel.get(), kReflectionV1).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  unlink(token_file.c_str());
}

TEST_F(SecurityTest, HealthPortAnswersWithoutCredentialsAndServesNothingElse) {
  ServerOptions options = TlsOptions(/*mutual=*/true);
  const std::string token_file = TokenFile("health");
  options.auth_token_file = token_file;
  options.health_listen = "127.0.0.1:0";
  Start(options);
  ASSERT_FALSE(server_->health_target().empty());
  EXPECT_EQ(StatusOrDie(HealthCheck(server_->health_target())), kServing);
  EXPECT_EQ(
      StatusOrDie(HealthCheck(server_->health_target(), "entrokv.v1.EntroKv")),
      kServing);
  // The API is not there, not even with the token.
  auto channel = grpc::CreateChannel(server_->health_target(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::EntroKv::NewStub(channel);
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer health");
  v1::CreateSessionRequest request;
  v1::CreateSessionResponse response;
  EXPECT_EQ(stub->CreateSession(&context, request, &response).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(EmptyStreamCall(channel.get(), kReflection).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);

  // Draining: NOT_SERVING on the health port while streams may finish.
  ClientOptions client_options;
  client_options.tls_root_certs_file = certs().Path("ca.pem");
  client_options.tls_cert_file = certs().Path("client.pem");
  client_options.tls_key_file = certs().Path("client.key");
  client_options.bearer_token = "health";
  std::unique_ptr<Client> client = Connect(client_options);
  ASSERT_NE(client, nullptr);
  SessionOptions session_options;
  session_options.offline_when_unavailable = false;
  session_options.create_deadline = absl::Seconds(5);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Session> session,
                       client->CreateSession(WindowConfig(4), session_options));
  std::thread drain([&] { server_->Shutdown(absl::Seconds(3)); });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(StatusOrDie(HealthCheck(server_->health_target())), kNotServing);
  session.reset();
  drain.join();
  unlink(token_file.c_str());
}

TEST_F(SecurityTest, UnixSocketGetsSocketModeAndGroup) {
  for (const char* mode : {"0660", "0600"}) {
    SCOPED_TRACE(mode);
    ServerOptions options = TestServerOptions();
    const std::string socket = UniqueSocket("mode");
    options.listen = {absl::StrCat("unix:", socket)};
    options.socket_mode = mode;
    options.socket_group = absl::StrCat(getgid());
    Start(options);
    struct stat info;
    ASSERT_EQ(stat(socket.c_str(), &info), 0);
    EXPECT_TRUE(S_ISSOCK(info.st_mode));
    EXPECT_EQ(info.st_mode & 07777, std::strtoul(mode, nullptr, 8));
    EXPECT_EQ(info.st_gid, getgid());
    server_.reset();
  }
  EXPECT_EQ(ServerOptions().socket_mode, "0660");
  EXPECT_EQ(ServerOptions().listen,
            std::vector<std::string>{"unix:/run/entrokv/entrokv.sock"});
}

TEST_F(SecurityTest, PlaintextNonLoopbackTcpNeedsAllowInsecureTcp) {
  ServerOptions options = TestServerOptions();
  options.listen = {"0.0.0.0:0"};
  absl::StatusOr<std::unique_ptr<Server>> refused = Server::Start(options);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
      << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("--allow_insecure_tcp"));
  EXPECT_THAT(refused.status().message(), HasSubstr("0.0.0.0:0"));
  // Loopback needs no permission; TLS or the flag lift the refusal.
  options.listen = {"127.0.0.1:0", "localhost:0"};
  EXPECT_OK(Server::Start(options).status());
  options.listen = {"0.0.0.0:0"};
  options.allow_insecure_tcp = true;
  EXPECT_OK(Server::Start(options).status());
  ServerOptions tls = TlsOptions(/*mutual=*/false);
  tls.listen = {"0.0.0.0:0"};
  EXPECT_OK(Server::Start(tls).status());
}

TEST_F(SecurityTest, BindFailureNamesMissingDirectory) {
  ServerOptions options = TestServerOptions();
  options.listen = {"unix:/tmp/entrokv-no-such-dir-xyz/entrokv.sock"};
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(),
              HasSubstr("ENOENT on /tmp/entrokv-no-such-dir-xyz"));
  EXPECT_THAT(server.status().message(), HasSubstr("does not exist"));
}

TEST_F(SecurityTest, BindFailureNamesFileThatIsNotADirectory) {
  const std::string file = UniqueSocket("file") + ".txt";
  WriteFile(file, "x");
  ServerOptions options = TestServerOptions();
  options.listen = {absl::StrCat("unix:", file, "/entrokv.sock")};
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(),
              HasSubstr(absl::StrCat("ENOTDIR on ", file)));
  unlink(file.c_str());
}

TEST_F(SecurityTest, BindFailureNamesAddressInUse) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ServerOptions options = TestServerOptions();
  options.listen = {absl::StrCat("127.0.0.1:", ntohs(addr.sin_port))};
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  close(fd);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("EADDRINUSE"));
}

TEST_F(SecurityTest, SecondServerOnALiveSocketIsRefused) {
  ServerOptions options = TestServerOptions();
  options.listen = {absl::StrCat("unix:", UniqueSocket("twice"))};
  Start(options);
  absl::StatusOr<std::unique_ptr<Server>> second = Server::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("EADDRINUSE"));
  // The first still answers.
  EXPECT_EQ(StatusOrDie(HealthCheck(server_->targets()[0])), kServing);
}

TEST_F(SecurityTest, BindFailureNamesOwnerOfUnwritableDirectory) {
  if (geteuid() == 0) GTEST_SKIP() << "root may write anywhere";
  ServerOptions options = TestServerOptions();
  options.listen = {"unix:/entrokv-test.sock"};  // "/" is root's, 0755.
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(),
              HasSubstr("EACCES on /: owned by uid 0"));
  EXPECT_THAT(server.status().message(),
              HasSubstr(absl::StrCat("server runs as uid ", getuid())));
}

// The client library's defaults from the engine's environment, as the
// deployment manifests set them (ENTROKV_TARGET, ENTROKV_STEP_DEADLINE_MS).
class ClientEnvironmentTest : public SecurityTest {
 protected:
  void TearDown() override {
    unsetenv("ENTROKV_TARGET");
    unsetenv("ENTROKV_STEP_DEADLINE_MS");
    SecurityTest::TearDown();
  }
};

TEST_F(ClientEnvironmentTest, UnsetTargetAndDeadlineComeFromEnvironment) {
  unsetenv("ENTROKV_TARGET");
  unsetenv("ENTROKV_STEP_DEADLINE_MS");
  EXPECT_EQ(ClientOptions().target, "unix:/run/entrokv/entrokv.sock");
  EXPECT_EQ(SessionOptions().step_deadline, absl::Milliseconds(100));
  setenv("ENTROKV_STEP_DEADLINE_MS", "", 1);  // Empty is unset.
  EXPECT_EQ(SessionOptions().step_deadline, absl::Milliseconds(100));

  ServerOptions options = TestServerOptions();
  options.listen = {absl::StrCat("unix:", UniqueSocket("env"))};
  Start(options);
  setenv("ENTROKV_TARGET", server_->targets()[0].c_str(), 1);
  setenv("ENTROKV_STEP_DEADLINE_MS", "2500", 1);
  EXPECT_EQ(ClientOptions().target, server_->targets()[0]);
  EXPECT_EQ(SessionOptions().step_deadline, absl::Milliseconds(2500));
  setenv("ENTROKV_STEP_DEADLINE_MS", "0.5", 1);
  EXPECT_EQ(SessionOptions().step_deadline, absl::Microseconds(500));
  // An engine that sets nothing reaches the server named by the environment.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client,
                       Client::Connect(ClientOptions()));
  EXPECT_EQ(client->options().target, server_->targets()[0]);
  EXPECT_OK(CreateAndStep(client.get()));
  // What the engine sets wins.
  ClientOptions explicit_options;
  explicit_options.target = "unix:/elsewhere.sock";
  EXPECT_EQ(explicit_options.target, "unix:/elsewhere.sock");
}

TEST_F(ClientEnvironmentTest, MalformedStepDeadlineFailsConnect) {
  for (const char* bad : {"abc", "-5", "0", "0.0005"}) {
    SCOPED_TRACE(bad);
    setenv("ENTROKV_STEP_DEADLINE_MS", bad, 1);
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect(ClientOptions());
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(client.status().message(),
                HasSubstr("ENTROKV_STEP_DEADLINE_MS"));
  }
}

TEST_F(ClientEnvironmentTest, ClientCertificateNeedsKeyAndRoots) {
  ClientOptions options;
  options.target = "127.0.0.1:1";
  options.tls_cert_file = certs().Path("client.pem");
  EXPECT_EQ(Client::Connect(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.tls_key_file = certs().Path("client.key");
  EXPECT_EQ(Client::Connect(options).status().code(),
            absl::StatusCode::kInvalidArgument);  // No roots.
  options.tls_root_certs_file = certs().Path("absent.pem");
  EXPECT_EQ(Client::Connect(options).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(LogFormatTest, JsonLinesParseWithSessionAndStep) {
  std::ostringstream out;
  auto logger = std::make_shared<spdlog::logger>(
      "json-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  ASSERT_OK(SetLogFormat("json"));
  {
    const ScopedLogFields fields("s-\"1\"", 42);
    spdlog::info(
        "quote \" backslash \\ newline \n tab \t bell \a bad \xff end");
  }
  spdlog::warn("no fields");
  EXPECT_FALSE(SetLogFormat("xml").ok());
  ASSERT_OK(SetLogFormat("text"));
  spdlog::set_default_logger(previous);

  const std::string path = UniqueSocket("json") + ".log";
  WriteFile(path, out.str());
  const std::string check = absl::StrCat(
      "/usr/bin/python3 -c '\n"
      "import json, sys\n"
      "lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]\n"
      "assert len(lines) == 2, lines\n"
      "a, b = lines\n"
      "assert a[\"level\"] == \"info\" and a[\"session\"] == \"s-\\\"1\\\"\" "
      "and a[\"step\"] == 42, a\n"
      "assert \"\\n\" in a[\"msg\"] and \"\\ufffd\" in a[\"msg\"], a\n"
      "assert b[\"level\"] == \"warning\" and \"session\" not in b, b\n"
      "assert a[\"ts\"].endswith(\"Z\"), a\n"
      "' ",
      path);
  EXPECT_EQ(std::system(check.c_str()), 0) << out.str();
  unlink(path.c_str());
}

}  // namespace
}  // namespace entrokv::server::testing
