// Simulated machines in network namespaces (netns_cluster.h).
#include "dist/netns_cluster.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>

#include "support/subprocess.h"

namespace tessel::dist {

namespace {

constexpr const char* kPrefix = "tsl";  // every name this file makes starts with it

Status ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProgramRun run = run_program(argv);
  if (run.exit_code == 0) return ok_status();
  std::string line;
  for (const std::string& a : argv)
    line += (line.empty() ? "" : " ") + a;
  while (!run.output.empty() && run.output.back() == '\n')
    run.output.pop_back();
  return unavailable("`{}` failed: {}", line, run.output);
}

std::vector<std::string> lines_of(const std::vector<std::string>& argv) {
  ProgramRun run = run_program(argv);
  std::vector<std::string> out;
  if (run.exit_code != 0) return out;
  std::istringstream in(run.output);
  std::string line;
  while (std::getline(in, line))
    out.push_back(line);
  return out;
}

bool process_exists(long pid) {
  return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
}

// The pid in a name made by this file ("tslPID-..." or "tslbPID-..."), or 0.
long owner_pid(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return 0;
  size_t at = std::strlen(kPrefix);
  if (at < name.size() && name[at] == 'b') ++at;
  long pid = 0;
  while (at < name.size() && std::isdigit(static_cast<unsigned char>(name[at])))
    pid = pid * 10 + (name[at++] - '0');
  return pid;
}

// Removes namespaces and bridges that a process which no longer runs left behind.
void remove_stale() {
  for (const std::string& line : lines_of({"ip", "netns", "list"})) {
    std::string name = line.substr(0, line.find(' '));
    long pid = owner_pid(name);
    if (pid != 0 && !process_exists(pid)) (void)ip({"netns", "del", name});
  }
  for (const std::string& line : lines_of({"ip", "-o", "link", "show", "type", "bridge"})) {
    // "12: tslb123x0: <BROADCAST,...": the name sits between the first ": " and the next ':'.
    size_t start = line.find(": ");
    if (start == std::string::npos) continue;
    start += 2;
    std::string name = line.substr(start, line.find(':', start) - start);
    long pid = owner_pid(name);
    if (pid != 0 && !process_exists(pid)) (void)ip({"link", "del", name});
  }
}

// A /24 under 10/8 that no interface here uses yet.
Expected<std::string> free_subnet_prefix() {
  std::vector<std::string> used = lines_of({"ip", "-o", "-4", "addr", "show"});
  std::random_device device;
  for (int attempt = 0; attempt < 64; ++attempt) {
    unsigned a = 100 + device() % 150, b = device() % 256;
    std::string prefix = fmt::format("10.{}.{}.", a, b);
    bool taken = false;
    for (const std::string& line : used)
      if (line.find(" " + prefix) != std::string::npos) taken = true;
    if (!taken) return prefix;
  }
  return unavailable("no free 10.x.y.0/24 subnet for the simulated machines");
}

std::string rate_text(double bytes_per_s) {
  return fmt::format("{}bit", static_cast<long long>(bytes_per_s * 8));
}

}  // namespace

Status NetnsCluster::available() {
  if (::geteuid() != 0)
    return unavailable("simulated machines need root (CAP_NET_ADMIN) to make network namespaces");
  if (find_program_in_path({"ip"}).empty())
    return unavailable("simulated machines need `ip` (Debian: iproute2)");
  const std::string probe = fmt::format("{}{}-probe", kPrefix, ::getpid());
  Status made = ip({"netns", "add", probe});
  if (!made.ok()) return made.with_context("cannot make a network namespace here");
  (void)ip({"netns", "del", probe});
  return ok_status();
}

Expected<std::unique_ptr<NetnsCluster>> NetnsCluster::create(int machines, const LinkShape& link) {
  if (machines < 1 || machines > 200)
    return invalid_argument("a simulated cluster has 1 to 200 machines, not {}", machines);
  TESSEL_TRY(available());
  remove_stale();
  std::unique_ptr<NetnsCluster> cluster(new NetnsCluster());
  Status built = cluster->build(machines, link);
  if (!built.ok()) return built;  // the destructor removes what was made
  return cluster;
}

Status NetnsCluster::build(int machines, const LinkShape& link) {
  static std::atomic<int> made{0};
  const int k = made.fetch_add(1);
  const long pid = ::getpid();
  TESSEL_ASSIGN_OR_RETURN(std::string prefix, free_subnet_prefix());
  subnet_ = prefix + "0/24";
  bridge_ = fmt::format("{}b{}x{}", kPrefix, pid, k);  // interface names: at most 15 characters
  TESSEL_TRY(ip({"link", "add", bridge_, "type", "bridge"}));
  TESSEL_TRY(ip({"addr", "add", prefix + "1/24", "dev", bridge_}));
  TESSEL_TRY(ip({"link", "set", bridge_, "up"}));
  for (int i = 0; i < machines; ++i) {
    const std::string ns = fmt::format("{}{}-{}-{}", kPrefix, pid, k, i);
    const std::string outside = fmt::format("{}v{}x{}x{}", kPrefix, pid, k, i).substr(0, 15);
    TESSEL_TRY(ip({"netns", "add", ns}));
    hosts_.push_back(ns);
    addresses_.push_back(prefix + std::to_string(i + 2));
    // Deleting the namespace deletes the pair with it.
    TESSEL_TRY(ip({"link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns}));
    TESSEL_TRY(ip({"link", "set", outside, "master", bridge_, "up"}));
    TESSEL_TRY(ip({"-n", ns, "addr", "add", addresses_.back() + "/24", "dev", "eth0"}));
    TESSEL_TRY(ip({"-n", ns, "link", "set", "eth0", "up"}));
    TESSEL_TRY(ip({"-n", ns, "link", "set", "lo", "up"}));
    if (link.rate_bytes_per_s <= 0 && link.delay_s <= 0) continue;
    // Both directions: the outside end's egress is the machine's download, eth0's its upload.
    for (const bool inside : {false, true}) {
      auto add_qdisc = [&](const std::vector<std::string>& qdisc) {
        std::vector<std::string> argv = {"tc"};
        if (inside) argv.insert(argv.end(), {"-n", ns});
        argv.insert(argv.end(), {"qdisc", "add", "dev", inside ? "eth0" : outside, "root"});
        argv.insert(argv.end(), qdisc.begin(), qdisc.end());
        return run_program(argv);
      };
      const double rate = link.rate_bytes_per_s;
      std::vector<std::string> netem = {"netem", "limit", "10000"};
      if (rate > 0) netem.insert(netem.end(), {"rate", rate_text(rate)});
      if (link.delay_s > 0)
        netem.insert(netem.end(), {"delay", fmt::format("{}us", link.delay_s * 1e6)});
      ProgramRun run = add_qdisc(netem);
      if (run.exit_code == 0) {
        shaping_ = "netem" + (rate > 0 ? " rate " + rate_text(rate) : std::string()) +
                   (link.delay_s > 0 ? fmt::format(" delay {}us", link.delay_s * 1e6) : "");
        continue;
      }
      // Kernels without sch_netem (some VMs) still have the token bucket: the rate holds, the
      // delay cannot be added.
      if (rate <= 0)
        return unavailable("this kernel has no netem qdisc, so no delay can be added: {}",
                           run.output);
      // A bucket of 1/100 s of traffic (at least 64 KiB, so one large TCP segment fits) and a
      // queue of 0.2 s: deep enough that TCP rarely loses a packet to the shaper.
      const long long burst = std::max<long long>(64 << 10, static_cast<long long>(rate / 100));
      const long long limit = std::max<long long>(burst * 2, static_cast<long long>(rate * 0.2));
      run = add_qdisc({"tbf", "rate", rate_text(rate), "burst", std::to_string(burst), "limit",
                       std::to_string(limit)});
      if (run.exit_code != 0) return unavailable("tc cannot limit the link's rate: {}", run.output);
      shaping_ = fmt::format("tbf rate {}{}", rate_text(rate),
                             link.delay_s > 0 ? " (no netem in this kernel: delay not added)" : "");
    }
  }
  return ok_status();
}

void NetnsCluster::tear_down() {
  for (const std::string& ns : hosts_)
    (void)ip({"netns", "del", ns});
  if (!bridge_.empty()) (void)ip({"link", "del", bridge_});
  hosts_.clear();
  bridge_.clear();
}

NetnsCluster::~NetnsCluster() {
  tear_down();
}

std::vector<std::string> netns_mpirun_args(const std::string& subnet) {
  return {"--mca", "btl",   "tcp,self",           "--mca", "btl_tcp_if_include",
          subnet,  "--mca", "oob_tcp_if_include", subnet};
}

Status exec_in_namespace(const std::string& host, const std::vector<std::string>& command) {
  if (command.empty()) return invalid_argument("netns-exec needs a command");
  const std::string path = "/var/run/netns/" + host;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error(fmt::format("opening network namespace {}", path));
  if (::setns(fd, CLONE_NEWNET) != 0) {
    Status s = errno_error(fmt::format("entering network namespace {}", host));
    ::close(fd);
    return s;
  }
  ::close(fd);
  if (::unshare(CLONE_NEWUTS) != 0) return errno_error("unshare(CLONE_NEWUTS)");
  if (::sethostname(host.data(), host.size()) != 0)
    return errno_error(fmt::format("sethostname({})", host));
  std::string line;
  for (const std::string& word : command)
    line += (line.empty() ? "" : " ") + word;
  const char* argv[] = {"/bin/sh", "-c", line.c_str(), nullptr};
  ::execv("/bin/sh", const_cast<char* const*>(argv));
  return errno_error("exec /bin/sh");
}

}  // namespace tessel::dist
