// `meshtrain run [options] [agent options] -- COMMAND...`: one command per host that starts the
// agent (`meshtrain agent ... --trainer external --trainer-socket SOCK`, this same binary) and,
// once the agent serves its trainer socket, the training process COMMAND with MESHTRAIN_SOCKET
// and MESHTRAIN_RPC in its environment (docs/contract.md "Command line"). Both children run in
// their own process groups; their output is printed line by line with a prefix; a signal to run
// is passed to the script, then the agent leaves the mesh gracefully; a crashed script is
// restarted up to --restart times while the agent keeps its model. Single-threaded: the whole
// orchestration is one poll() loop over the children's pipes and a signalfd.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "daemon/config.h"
#include "daemon/config_file.h"

extern char** environ;

namespace meshtrain::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Longest path a unix socket takes (sockaddr_un.sun_path, with its NUL).
constexpr size_t kMaxSocketPath = 107;
// A line longer than this is printed in pieces.
constexpr size_t kMaxLine = 64 << 10;

struct RunOptions {
  int restart = 0;
  std::string socket;
  double stop_timeout_s = 10;
  double start_timeout_s = 60;
  double agent_stop_timeout_s = 30;
  std::vector<std::string> agent_args;  // the options before `--`, passed to the agent
  std::vector<std::string> command;     // after `--`
  bool has_command = false;
};

RunOptions& Options() {
  static RunOptions options;
  return options;
}

std::string ExitText(int code) {
  if (code > 128)
    return "signal " + std::to_string(code - 128) + " (" + strsignal(code - 128) + ")";
  return "status " + std::to_string(code);
}

// One line on stdout: "PREFIX | LINE".
void Emit(const std::string& prefix, std::string_view line) {
  std::string out = prefix + " | ";
  out.append(line);
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

void Note(const std::string& msg) { Emit("run", msg); }

// A child process in its own process group, stdout and stderr through one pipe read by `fd`.
struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string prefix;
  std::string partial;  // bytes after the last newline
  bool running = false;
  int code = 0;  // exit status, or 128 + signal

  // Reads what the pipe holds (non-blocking) and prints every complete line; closes the pipe at
  // end of file or when `to_eof` is false and nothing more is there, flushing a partial line.
  void Drain(bool to_eof) {
    char buf[16384];
    for (int i = 0; fd >= 0 && i < (to_eof ? 64 : 4096); ++i) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) || !to_eof) Close();
        return;
      }
      partial.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
        Emit(prefix, std::string_view(partial).substr(start, nl - start));
      }
      partial.erase(0, start);
      if (partial.size() >= kMaxLine) {
        Emit(prefix, partial);
        partial.clear();
      }
    }
  }

  void Close() {
    if (!partial.empty()) Emit(prefix, partial);
    partial.clear();
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

// Starts argv[0] (searched on PATH; `exe` instead when given) with `env`, in a new process
// group, stdin /dev/null, stdout and stderr into a pipe, and SIGTERM when run dies.
bool Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
           const char* exe, Child* child, std::string* error) {
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  args.push_back(nullptr);
  envp.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // The child: only async-signal-safe calls from here to exec.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);  // run died before the prctl took effect
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    if (exe != nullptr) {
      execve(exe, args.data(), envp.data());
    } else {
      execvpe(args[0], args.data(), envp.data());
    }
    const char* why = strerror(errno);
    const char* parts[] = {"cannot run ", args[0], ": ", why, "\n"};
    for (const char* p : parts) {
      if (write(STDERR_FILENO, p, strlen(p)) < 0) break;
    }
    _exit(127);
  }
  const int fork_errno = errno;
  if (null_fd >= 0) close(null_fd);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    *error = std::string("fork: ") + std::strerror(fork_errno);
    return false;
  }
  setpgid(pid, pid);  // also here, so that the group exists before any kill(-pid)
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  child->pid = pid;
  child->fd = fds[0];
  child->partial.clear();
  child->running = true;
  return true;
}

// True once `path` is a unix socket that a process listens on (/proc/net/unix: the Flags field
// has __SO_ACCEPTCON, 0x10000); just its existence where /proc/net/unix cannot be read.
bool SocketListening(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  std::ifstream table("/proc/net/unix");
  if (!table) return true;
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string num, refs, proto, flags, type, state, inode, name;
    if (!(fields >> num >> refs >> proto >> flags >> type >> state >> inode >> name)) continue;
    if (name == path && (std::strtoul(flags.c_str(), nullptr, 16) & 0x10000) != 0) return true;
  }
  return false;
}

// The private directory holding the default socket, removed (with the socket) at exit.
class SocketDir {
 public:
  ~SocketDir() {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A fresh 0700 directory under $XDG_RUNTIME_DIR, $TMPDIR or /tmp; returns the socket in it.
  bool Make(std::string* socket, std::string* error) {
    for (const char* var : {"XDG_RUNTIME_DIR", "TMPDIR", ""}) {
      const char* base = *var != '\0' ? std::getenv(var) : "/tmp";
      if (base == nullptr || *base == '\0') continue;
      std::string templ = std::string(base) + "/meshtrain-run-XXXXXX";
      if (templ.size() + 13 > kMaxSocketPath || mkdtemp(templ.data()) == nullptr) continue;
      dir_ = templ;
      *socket = dir_ + "/trainer.sock";
      return true;
    }
    *error = std::string("cannot make a directory for the trainer socket: ") + std::strerror(errno);
    return false;
  }

 private:
  std::string dir_;
};

std::vector<std::string> EnvWith(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const auto name = kv.substr(0, kv.find('='));
    if (std::none_of(set.begin(), set.end(), [&](const auto& s) { return s.first == name; })) {
      env.emplace_back(kv);
    }
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

std::string SelfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("meshtrain") : p.string();
}

// The orchestration: the agent, then the script (restarted on a crash), a signal passed on,
// the agent stopped last; every child reaped.
class Runner {
 public:
  Runner(RunOptions options, std::string socket, std::string rpc)
      : o_(std::move(options)), socket_(std::move(socket)), rpc_(std::move(rpc)) {
    agent_.prefix = "agent";
  }

  int Run() {
    if (!SetUpSignals()) return RuntimeError(std::string("signalfd: ") + std::strerror(errno));
    std::vector<std::string> argv = {SelfExe(), "agent"};
    argv.insert(argv.end(), o_.agent_args.begin(), o_.agent_args.end());
    for (const char* a : {"--trainer", "external", "--trainer-socket"}) argv.emplace_back(a);
    argv.push_back(socket_);
    std::string error;
    if (!Spawn(argv, EnvWith({}), "/proc/self/exe", &agent_, &error)) return RuntimeError(error);
    Note("agent started (pid " + std::to_string(agent_.pid) + "), trainer socket " + socket_);
    if (const int code = WaitForSocket(); code >= 0) return code;
    if (!StartScript(&error)) {
      StopAgent();
      Finish();
      return RuntimeError(error);
    }
    Finish();
    if (agent_failed_) {
      return RuntimeError("the agent exited unexpectedly (" + ExitText(agent_.code) + ")");
    }
    Note("exit " + std::to_string(script_.code));
    return script_.code;
  }

 private:
  bool SetUpSignals() {
    std::signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, s);
    if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return false;
    sigfd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return sigfd_ >= 0;
  }

  // Until the agent listens on the socket: -1 then; else run's exit status (the agent exited
  // first, a signal came, or the wait timed out), everything stopped.
  int WaitForSocket() {
    const auto deadline = Clock::now() + Seconds(o_.start_timeout_s);
    for (;;) {
      // A signal first: once one came, the script must not start.
      if (signals_ == 0 && agent_.running && SocketListening(socket_)) return -1;
      if (!agent_.running) {
        agent_.Drain(true);
        const int code = agent_.code == kExitUsage ? kExitUsage : kExitRuntime;
        std::fprintf(stderr, "error: the agent exited (%s) before serving its trainer socket%s\n",
                     ExitText(agent_.code).c_str(),
                     code == kExitUsage ? ": a usage error (its message is above)" : "");
        return code;
      }
      if (signals_ > 0 || Clock::now() > deadline) {
        if (signals_ == 0) {
          std::fprintf(stderr, "error: the agent did not serve %s within %.0f s\n", socket_.c_str(),
                       o_.start_timeout_s);
        }
        StopAgent();
        Finish();
        return signals_ > 0 ? 128 + first_signal_ : kExitRuntime;
      }
      Poll(100);
    }
  }

  bool StartScript(std::string* error) {
    script_.prefix = starts_ == 0 ? "train" : "train#" + std::to_string(starts_ + 1);
    ++starts_;
    std::vector<std::pair<std::string, std::string>> set = {
        {"MESHTRAIN_SOCKET", socket_}, {"MESHTRAIN_RPC", rpc_}, {"MESHTRAIN_RPC_ADDR", rpc_}};
    // Python buffers a pipe's output in blocks: lines would come late and out of order.
    if (std::getenv("PYTHONUNBUFFERED") == nullptr) set.emplace_back("PYTHONUNBUFFERED", "1");
    const auto env = EnvWith(set);
    if (!Spawn(o_.command, env, nullptr, &script_, error)) return false;
    Note(script_.prefix + " started (pid " + std::to_string(script_.pid) + "): " + o_.command[0]);
    return true;
  }

  // Polls until both children have exited.
  void Finish() {
    while (agent_.running || script_.running) {
      auto wait = std::chrono::milliseconds(200);
      for (const auto& d : {script_deadline_, agent_deadline_, second_term_}) {
        if (d) wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(*d - Now()));
      }
      Poll(static_cast<int>(std::max<int64_t>(0, wait.count())));
    }
    agent_.Drain(false);
    script_.Drain(false);
  }

  // One round: output, signals, exits, deadlines.
  void Poll(int timeout_ms) {
    pollfd fds[3] = {{sigfd_, POLLIN, 0}, {agent_.fd, POLLIN, 0}, {script_.fd, POLLIN, 0}};
    if (poll(fds, 3, timeout_ms) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) agent_.Drain(true);
    if (fds[2].revents != 0) script_.Drain(true);
    signalfd_siginfo info{};
    while (read(sigfd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo != SIGCHLD) OnSignal(static_cast<int>(info.ssi_signo));
    }
    // The agent first: a script that failed because its agent died is not restarted.
    Reap(&agent_);
    Reap(&script_);
    CheckDeadlines();
  }

  // Reaps the child when it has exited; what is left of its process group is killed first
  // (while the unreaped leader keeps its process group ID from being reused).
  void Reap(Child* c) {
    if (!c->running) return;
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(c->pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != c->pid) {
      return;
    }
    kill(-c->pid, SIGKILL);
    int status = 0;
    while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
    }
    c->running = false;
    c->code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    c->Drain(false);
    if (c == &agent_) {
      OnAgentExit();
    } else {
      OnScriptExit();
    }
  }

  void OnScriptExit() {
    script_deadline_.reset();
    const bool crashed = script_.code != 0;
    if (crashed && signals_ == 0 && agent_.running && restarts_ < o_.restart) {
      ++restarts_;
      Note(script_.prefix + " exited (" + ExitText(script_.code) + "): restarting it (restart " +
           std::to_string(restarts_) + " of " + std::to_string(o_.restart) + ")");
      std::string error;
      if (StartScript(&error)) return;
      Note(error);
      script_.code = kExitRuntime;
    }
    Note(script_.prefix + " exited (" + ExitText(script_.code) + ")" +
         (agent_.running ? ": stopping the agent" : ""));
    StopAgent();
  }

  void OnAgentExit() {
    agent_deadline_.reset();
    second_term_.reset();
    if (agent_stopped_) {
      Note("the agent exited (" + ExitText(agent_.code) + ")");
      return;
    }
    agent_failed_ = script_.running || starts_ == 0;
    Note("the agent exited unexpectedly (" + ExitText(agent_.code) + ")" +
         (script_.running ? ": stopping " + script_.prefix : ""));
    if (script_.running) {
      kill(-script_.pid, SIGTERM);
      script_deadline_ = Now() + Seconds(o_.stop_timeout_s);
    }
  }

  void OnSignal(int sig) {
    const char* name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
    if (++signals_ == 1) {
      first_signal_ = sig;
      if (script_.running) {
        Note(std::string("received ") + name + ": passing it to " + script_.prefix +
             ", then stopping the agent");
        kill(-script_.pid, sig);
        script_deadline_ = Now() + Seconds(o_.stop_timeout_s);
      } else {
        Note(std::string("received ") + name + (agent_.running ? ": stopping the agent" : ""));
      }
      return;
    }
    if (signals_ == 2) {
      Note(std::string("received ") + name + " again: killing the script, the agent exits at once");
      if (script_.running) kill(-script_.pid, SIGKILL);
      if (agent_.running && agent_stopped_) {
        kill(agent_.pid, SIGTERM);
      } else if (agent_.running) {
        StopAgent();
        second_term_ = Now() + std::chrono::milliseconds(300);
      }
      return;
    }
    Note(std::string("received ") + name + " a third time: killing everything");
    if (script_.running) kill(-script_.pid, SIGKILL);
    if (agent_.running) kill(-agent_.pid, SIGKILL);
  }

  // The graceful leave: SIGTERM, then SIGKILL after the agent's stop timeout.
  void StopAgent() {
    if (!agent_.running || agent_stopped_) return;
    agent_stopped_ = true;
    kill(agent_.pid, SIGTERM);
    agent_deadline_ = Now() + Seconds(o_.agent_stop_timeout_s);
  }

  void CheckDeadlines() {
    const auto now = Now();
    if (script_deadline_ && now >= *script_deadline_ && script_.running) {
      Note(script_.prefix + " did not exit within " + Num(o_.stop_timeout_s) + " s: killing it");
      kill(-script_.pid, SIGKILL);
      script_deadline_.reset();
    }
    if (second_term_ && now >= *second_term_ && agent_.running) {
      kill(agent_.pid, SIGTERM);
      second_term_.reset();
    }
    if (agent_deadline_ && now >= *agent_deadline_ && agent_.running) {
      Note("the agent did not exit within " + Num(o_.agent_stop_timeout_s) + " s: killing it");
      kill(-agent_.pid, SIGKILL);
      agent_deadline_.reset();
    }
  }

  static Clock::time_point Now() { return Clock::now(); }
  static Clock::duration Seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  static std::string Num(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", s);
    return buf;
  }

  RunOptions o_;
  std::string socket_, rpc_;
  Child agent_, script_;
  int sigfd_ = -1;
  int signals_ = 0, first_signal_ = 0;
  int starts_ = 0, restarts_ = 0;
  bool agent_stopped_ = false;  // SIGTERM sent: its exit is expected
  bool agent_failed_ = false;   // it exited by itself before the script finished
  std::optional<Clock::time_point> script_deadline_, agent_deadline_, second_term_;
};

// The value of option `name` at args[*i] ("--name V" or "--name=V"); advances *i past it.
std::optional<std::string> OptionValue(const std::vector<std::string>& args, size_t* i,
                                       const std::string& name) {
  const std::string& a = args[*i];
  if (a == name && *i + 1 < args.size()) return args[++*i];
  if (a.rfind(name + "=", 0) == 0) return a.substr(name.size() + 1);
  return std::nullopt;
}

// Checks --trainer and --trainer-socket among the agent's options (on the command line or in
// its --config file, `expanded`), takes the socket from them, and drops them from the options
// passed on. A usage error message, or empty.
std::string TakeTrainerOptions(const std::vector<std::string>& expanded, RunOptions* o) {
  for (size_t i = 0; i < expanded.size(); ++i) {
    if (auto v = OptionValue(expanded, &i, "--trainer"); v && *v != "external") {
      return "run serves the script with --trainer external; --trainer " + *v + " cannot be given";
    }
    if (auto v = OptionValue(expanded, &i, "--trainer-socket")) {
      if (!o->socket.empty() && *v != o->socket) {
        return "--trainer-socket " + *v + " conflicts with --socket " + o->socket;
      }
      o->socket = *v;
    }
  }
  std::vector<std::string> kept;
  for (size_t i = 0; i < o->agent_args.size(); ++i) {
    if (!OptionValue(o->agent_args, &i, "--trainer") &&
        !OptionValue(o->agent_args, &i, "--trainer-socket")) {
      kept.push_back(o->agent_args[i]);
    }
  }
  o->agent_args = kept;
  return {};
}

int RunRun(CLI::App* app) {
  RunOptions o = Options();
  o.agent_args = app->remaining();
  if (!o.has_command || o.command.empty()) {
    return UsageError("run needs the training command after `--`: meshtrain run [options] " +
                      std::string("[agent options] -- COMMAND [ARGS...]"));
  }
  std::vector<std::string> expanded;
  std::string error;
  std::vector<std::string> argv = {"meshtrain", "agent"};
  argv.insert(argv.end(), o.agent_args.begin(), o.agent_args.end());
  if (!daemon::ExpandAgentConfig(argv, &expanded, &error)) return UsageError(error);
  if (error = TakeTrainerOptions(expanded, &o); !error.empty()) return UsageError(error);
  SocketDir dir;
  if (o.socket.empty()) {
    if (!dir.Make(&o.socket, &error)) return RuntimeError(error);
  } else {
    std::error_code ec;
    o.socket = std::filesystem::absolute(o.socket, ec).lexically_normal().string();
  }
  // The agent's options as it will see them, checked here: a usage error starts nothing.
  std::vector<std::string> agent = o.agent_args;
  for (const char* a : {"--trainer", "external", "--trainer-socket"}) agent.emplace_back(a);
  agent.push_back(o.socket);
  daemon::AgentConfig config;
  if (!ParseAgentArgs(agent, &config, &error)) return UsageError(error);
  std::string socket = o.socket;
  return Runner(std::move(o), std::move(socket), config.rpc).Run();
}

}  // namespace

void TakeRunCommand(std::vector<std::string>* args) {
  auto dashes = std::find(args->begin(), args->end(), "--");
  Options().has_command = dashes != args->end();
  if (dashes == args->end()) return;
  Options().command.assign(dashes + 1, args->end());
  args->erase(dashes, args->end());
}

Command AddRunCommand(CLI::App& app) {
  RunOptions& o = Options();
  CLI::App* run =
      app.add_subcommand("run",
                         "Run an agent and a training script together (like torchrun): [options] "
                         "[agent options] -- COMMAND...");
  run->allow_extras();
  run->add_option("--restart", o.restart,
                  "Start the script again when it crashes (exits non-zero or is killed by a "
                  "signal run did not pass on), up to N times; the agent keeps running and the "
                  "script resumes from the mesh's step")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  run->add_option("--socket", o.socket,
                  "The agent's --trainer-socket (default: trainer.sock in a fresh private "
                  "directory under $XDG_RUNTIME_DIR, $TMPDIR or /tmp, removed at exit)");
  run->add_option("--stop-timeout", o.stop_timeout_s,
                  "Seconds the script has to exit after a signal was passed on (or the agent "
                  "died), before its process group is killed")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--start-timeout", o.start_timeout_s,
                  "Seconds to wait for the agent to serve its trainer socket")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->footer(
      "Every other option before `--` is an agent option (see `meshtrain agent --help`, "
      "--config FILE included): the agent runs as `meshtrain agent OPTIONS --trainer external "
      "--trainer-socket SOCKET`. Once it serves the socket, COMMAND starts with "
      "MESHTRAIN_SOCKET=SOCKET and MESHTRAIN_RPC (and MESHTRAIN_RPC_ADDR) = the agent's --rpc "
      "in its environment (and PYTHONUNBUFFERED=1 unless set) and stdin /dev/null. Both print "
      "through run, each line prefixed "
      "(`agent | `, `train | `, `train#2 | ` after a restart).\n\nSIGINT, SIGTERM or SIGHUP to "
      "run: the signal goes to the script's process group; once the script has exited (or "
      "after --stop-timeout: SIGKILL), the agent gets SIGTERM and leaves the mesh gracefully "
      "(SIGKILL after 30 s). A second signal kills the script and makes the agent exit at once. "
      "When the script exits by itself the agent is stopped the same way. If the agent dies, "
      "the script gets SIGTERM and run exits 1.\n\nExit status: the script's (128 + N if it "
      "died by signal N); 2 on a usage error (the agent's included); 1 when the agent did not "
      "start or died.");
  return {run, [run] { return RunRun(run); }};
}

}  // namespace meshtrain::cli
