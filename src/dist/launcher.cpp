// Starting, watching and stopping the ranks of a local job (launcher.h).
#include "dist/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <map>

#include "dist/rendezvous.h"
#include "dist/store.h"

extern char** environ;

namespace tessel::dist {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Signals received by the launcher itself, forwarded to the ranks.
volatile std::sig_atomic_t pending_signal = 0;
int signal_pipe[2] = {-1, -1};
void on_signal(int sig) {
  pending_signal = sig;
  if (signal_pipe[1] >= 0) {
    char byte = 1;
    (void)!::write(signal_pipe[1], &byte, 1);
  }
}

// One output stream of one rank: bytes are cut into lines and each line gets the prefix.
struct Output {
  int fd = -1;
  int rank = 0;
  bool is_stderr = false;
  std::string pending;  // a line not yet ended
};

struct Child {
  int rank = 0;
  pid_t pid = 0;
  bool running = true;
  RankOutcome outcome;
};

std::string which(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// Removes /dev/shm/tessel-<job>-* left behind by ranks that died before removing them.
int remove_job_segments(const std::string& job) {
  int removed = 0;
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return 0;
  const std::string prefix = "tessel-" + job + "-";
  while (dirent* entry = ::readdir(dir)) {
    if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    std::string name = fmt::format("/{}", entry->d_name);
    if (::shm_unlink(name.c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

}  // namespace

std::string RankOutcome::describe() const {
  if (signal != 0)
    return fmt::format("rank {} (pid {}) was killed by signal {} ({})", rank, pid, signal,
                       strsignal(signal));
  return fmt::format("rank {} (pid {}) exited with code {}", rank, pid, exit_code);
}

Expected<LaunchResult> launch(const LaunchOptions& options) {
  if (options.nranks < 1)
    return invalid_argument("launch needs at least one rank, not {}", options.nranks);
  if (options.command.empty()) return invalid_argument("launch needs a command to run");
  const std::string job = random_key().substr(0, 8);

  // The programs to start, each with its environment, prepared before fork().
  std::unique_ptr<StoreServer> store;
  std::vector<std::vector<std::string>> argvs, envs;
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e)
    base_env.emplace_back(*e);
  auto with = [](std::vector<std::string> env, const std::string& key, const std::string& value) {
    std::erase_if(env, [&](const std::string& kv) { return kv.rfind(key + "=", 0) == 0; });
    env.push_back(key + "=" + value);
    return env;
  };
  for (auto& [key, value] : options.env)
    base_env = with(base_env, key, value);
  base_env = with(base_env, "TESSEL_JOB_ID", job);
  base_env = with(base_env, "TESSEL_BACKEND", backend_name(options.backend));
  if (options.backend == Backend::kMpi) {
    std::string mpirun = which("mpirun");
    if (mpirun.empty())
      return unavailable(
          "the mpi backend starts ranks with mpirun, which is not installed "
          "(Debian: openmpi-bin)");
    std::vector<std::string> argv = {mpirun, "-n", std::to_string(options.nranks),
                                     "--oversubscribe", "--tag-output"};
    if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
    if (!options.hosts.empty()) {
      // host:slots with the ranks spread evenly, filled in order (mpirun maps by slot).
      const size_t n = options.hosts.size();
      const size_t slots = (size_t(options.nranks) + n - 1) / n;
      std::string list;
      for (const std::string& host : options.hosts)
        list += fmt::format("{}{}:{}", list.empty() ? "" : ",", host, slots);
      argv.insert(argv.end(), {"--host", list, "--map-by", "slot"});
    }
    if (!options.rsh_agent.empty()) {
      std::string agent;
      for (const std::string& word : options.rsh_agent)
        agent += (agent.empty() ? "" : " ") + word;
      argv.insert(argv.end(), {"--mca", "plm_rsh_agent", agent});
    }
    argv.insert(argv.end(), options.mpirun_args.begin(), options.mpirun_args.end());
    for (const char* name : {"TESSEL_BACKEND", "TESSEL_JOB_ID"}) {
      argv.push_back("-x");
      argv.push_back(name);
    }
    for (auto& [key, value] : options.env) {
      argv.push_back("-x");
      argv.push_back(key);
    }
    argv.insert(argv.end(), options.command.begin(), options.command.end());
    argvs.push_back(argv);
    envs.push_back(base_env);
  } else {
    TESSEL_ASSIGN_OR_RETURN(store, StoreServer::start("127.0.0.1", 0));
    base_env = with(base_env, "TESSEL_MASTER_ADDR", "127.0.0.1");
    base_env = with(base_env, "TESSEL_MASTER_PORT", std::to_string(store->port()));
    base_env = with(base_env, "TESSEL_WORLD_SIZE", std::to_string(options.nranks));
    base_env = with(base_env, "TESSEL_USE_AGENT_STORE", "1");
    for (int r = 0; r < options.nranks; ++r) {
      argvs.push_back(options.command);
      envs.push_back(with(with(base_env, "TESSEL_RANK", std::to_string(r)), "TESSEL_LOCAL_RANK",
                          std::to_string(r)));
    }
  }

  if (options.forward_signals) {
    if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return errno_error("signal pipe");
    struct sigaction action {};
    action.sa_handler = on_signal;
    ::sigaction(SIGINT, &action, nullptr);
    ::sigaction(SIGTERM, &action, nullptr);
  }

  const auto start = Clock::now();
  std::vector<Child> children;
  std::vector<Output> outputs;
  std::string spawn_error;
  for (size_t i = 0; i < argvs.size(); ++i) {
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      spawn_error = fmt::format("pipe: {}", std::strerror(errno));
      break;
    }
    std::vector<char*> argv, envp;
    for (auto& a : argvs[i])
      argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envs[i])
      envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string program = which(argvs[i][0]);
    pid_t pid = ::fork();
    if (pid == 0) {
      // Child: only async-signal-safe calls until exec.
      ::setpgid(0, 0);  // its own process group, so that stopping it stops what it started
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      if (!program.empty()) ::execve(program.c_str(), argv.data(), envp.data());
      const char message[] = "tessel launch: cannot run the command\n";
      (void)!::write(STDERR_FILENO, message, sizeof(message) - 1);
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (pid < 0) {
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
      spawn_error = fmt::format("fork: {}", std::strerror(errno));
      break;
    }
    ::setpgid(pid, pid);  // also here, so it holds before the child runs
    Child child;
    child.rank = static_cast<int>(i);
    child.pid = pid;
    child.outcome.rank = child.rank;
    child.outcome.pid = pid;
    children.push_back(child);
    outputs.push_back({out_pipe[0], child.rank, false, ""});
    outputs.push_back({err_pipe[0], child.rank, true, ""});
  }

  LaunchResult result;
  const bool under_mpirun = options.backend == Backend::kMpi;
  // mpirun --tag-output prefixes lines with "[jobid,rank]<stdout>:" or "<stderr>:"; rewrite it
  // to tessel's "[rank N] " and file the line under that rank.
  std::map<int, std::string> captured;
  std::string mpirun_noticed;  // mpirun's sentence about the rank that failed first
  auto emit = [&](Output& out, std::string line) {
    int rank = out.rank;
    if (under_mpirun && mpirun_noticed.empty()) {
      constexpr std::string_view kNoticed = "noticed that ";
      size_t at = line.find("noticed that process rank");
      if (at != std::string::npos) mpirun_noticed = line.substr(at + kNoticed.size());
    }
    if (under_mpirun && line.size() > 2 && line[0] == '[') {
      size_t comma = line.find(','), close = line.find(']'), colon = line.find(">:");
      if (comma != std::string::npos && close != std::string::npos && colon != std::string::npos &&
          comma < close && close < colon) {
        rank = std::atoi(line.substr(comma + 1, close - comma - 1).c_str());
        line = line.substr(colon + 2);
      }
    }
    std::string text = fmt::format("[rank {}] {}\n", rank, line);
    if (options.capture) {
      captured[rank] += text;
    } else {
      FILE* stream = out.is_stderr ? stderr : stdout;
      std::fwrite(text.data(), 1, text.size(), stream);
      std::fflush(stream);
    }
  };
  auto drain = [&](Output& out, bool at_end) {
    char buffer[65536];
    for (;;) {
      ssize_t n = ::read(out.fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (!out.pending.empty()) emit(out, std::exchange(out.pending, ""));
        ::close(out.fd);
        out.fd = -1;
        return;
      }
      out.pending.append(buffer, static_cast<size_t>(n));
      size_t newline;
      while ((newline = out.pending.find('\n')) != std::string::npos) {
        emit(out, out.pending.substr(0, newline));
        out.pending.erase(0, newline + 1);
      }
      if (!at_end) return;
    }
  };

  bool stopping = !spawn_error.empty();
  Clock::time_point kill_at{};
  auto stop_others = [&](int signal) {
    for (Child& c : children)
      if (c.running) ::kill(-c.pid, signal);
  };
  if (stopping) {
    stop_others(SIGTERM);
    kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options.kill_grace_s));
  }

  size_t running = children.size();
  while (running > 0 ||
         std::any_of(outputs.begin(), outputs.end(), [](const Output& o) { return o.fd >= 0; })) {
    std::vector<pollfd> fds;
    std::vector<Output*> owners;
    for (Output& out : outputs)
      if (out.fd >= 0) {
        fds.push_back({out.fd, POLLIN, 0});
        owners.push_back(&out);
      }
    if (signal_pipe[0] >= 0) fds.push_back({signal_pipe[0], POLLIN, 0});
    ::poll(fds.data(), fds.size(), running > 0 ? 20 : 200);
    for (size_t i = 0; i < owners.size(); ++i)
      if (fds[i].revents) drain(*owners[i], false);
    if (pending_signal) {
      int sig = pending_signal;
      pending_signal = 0;
      char sink[64];
      while (::read(signal_pipe[0], sink, sizeof(sink)) > 0) {
      }
      stop_others(sig);
      if (!stopping) {
        stopping = true;
        kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options.kill_grace_s));
      }
    }
    for (Child& c : children) {
      if (!c.running) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.running = false;
      --running;
      c.outcome.seconds = seconds_since(start);
      if (WIFSIGNALED(status))
        c.outcome.signal = WTERMSIG(status);
      else
        c.outcome.exit_code = WEXITSTATUS(status);
      if (c.outcome.failed() && result.first_failure.empty()) {
        result.first_failure = under_mpirun
                                   ? fmt::format("mpirun exited with code {}", c.outcome.exit_code)
                                   : c.outcome.describe();
        result.exit_code = c.outcome.signal ? 128 + c.outcome.signal : c.outcome.exit_code;
        if (options.kill_on_failure && !stopping) {
          stopping = true;
          stop_others(SIGTERM);
          kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(options.kill_grace_s));
        }
      }
    }
    if (stopping && running > 0 && Clock::now() >= kill_at) stop_others(SIGKILL);
    if (options.deadline_s > 0 && running > 0 && !result.deadline_passed &&
        seconds_since(start) > options.deadline_s) {
      result.deadline_passed = true;
      stop_others(SIGKILL);
    }
    // Ranks may have left children holding the pipes open: stop reading once all ranks ended.
    if (running == 0)
      for (Output& out : outputs)
        if (out.fd >= 0) drain(out, true);
  }

  if (options.forward_signals) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::close(signal_pipe[0]);
    ::close(signal_pipe[1]);
    signal_pipe[0] = signal_pipe[1] = -1;
  }
  result.leaked_segments_removed = remove_job_segments(job);
  if (!mpirun_noticed.empty() && !result.first_failure.empty()) {
    // "process rank 1 with PID 42 on node b exited on signal 9 (Killed)."
    while (!mpirun_noticed.empty() && mpirun_noticed.back() == '.')
      mpirun_noticed.pop_back();
    result.first_failure = fmt::format("{} ({})", mpirun_noticed, result.first_failure);
  }
  for (Child& c : children) {
    c.outcome.output = captured[c.rank];
    result.ranks.push_back(c.outcome);
  }
  if (under_mpirun && !result.ranks.empty()) {
    // One process (mpirun) ran every rank: keep its exit status, split the output by rank.
    RankOutcome all = result.ranks.front();
    result.ranks.clear();
    for (int r = 0; r < options.nranks; ++r) {
      RankOutcome one = all;
      one.rank = r;
      one.output = captured[r];
      result.ranks.push_back(one);
    }
  }
  if (!spawn_error.empty()) return io_error("starting rank {}: {}", children.size(), spawn_error);
  return result;
}

}  // namespace tessel::dist
