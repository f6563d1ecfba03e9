// leasejob's native guard: the process between leasejob and the child that stops the child's
// process group when leasejob is gone (EOF on its control socket, however it died) or when the
// lease's stop point has passed, whatever happens to leasejob meanwhile. The twin of
// src/lease/guard.ts (the Node guard, the fallback where this one is not built): both speak the
// line protocol of src/lease/guard-protocol.ts on fd 3, and one test suite runs against both.
//
// One poll() loop over the control socket, a signalfd (SIGCHLD and the signals passed on to the
// child's group) and a timerfd on CLOCK_BOOTTIME, which keeps counting while the machine is
// suspended (CLOCK_MONOTONIC, leasejob's clock, does not): a stop point converted once from
// leasejob's monotonic milliseconds is then still the lease's instant after a resume.
// A child subreaper, so a descendant that leaves the child's group (setsid, a double fork) is
// re-parented here and stopped at the stop point too. Nothing is allocated: the protocol parser
// writes into fixed static buffers and refuses what does not fit.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CONTROL_FD 3
// Exit codes of the guard itself (the child's own code otherwise): leasejob gone before the
// start; a line it could not read; the command could not be started.
#define EXIT_PARENT_GONE 1
#define EXIT_PROTOCOL 70
#define EXIT_SPAWN 127
// The command's strings (file, arguments, environment, directory) decoded, NUL-terminated: the
// kernel takes at most ARG_MAX (a quarter of the stack limit, 2 MiB by default, 6 MiB at most)
// for arguments and environment together, so this holds anything execve could accept.
#define ARENA_BYTES (8u << 20)
#define MAX_STRINGS (1u << 18)
#define KEYWORD_MAX 15
#define SCRATCH_MAX 63
// Once stopping, how often the group is looked at again (ms), and how long after SIGKILL the
// guard waits for its members before it exits anyway (a process in uninterruptible I/O takes
// SIGKILL when it next leaves the kernel). The Node guard uses the same figures.
#define GONE_POLL_MS 50
#define KILL_SETTLE_MS 1000
#define NS_PER_MS 1000000LL

static char arena[ARENA_BYTES];
static size_t arena_used;
static char *argv_[MAX_STRINGS + 2];
static char *envp_[MAX_STRINGS + 1];
static size_t argc_, envc_;
static char *file_, *cwd_;
static int user_set;
static uint32_t uid_, gid_;
static int64_t grace_ms;

static int64_t stop_at_ns = INT64_MAX; // CLOCK_BOOTTIME
static int64_t kill_at_ns = INT64_MAX;
static pid_t child;           // the child, leader of its own session and group; 0 before start
static int child_status = -1; // its exit code as the guard passes it on, once reaped
static int term_sent, released, parent_gone;
static int timer_fd = -1;

// ---- the clock -------------------------------------------------------------------------------

static int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/**
 * leasejob's stop point (ms on CLOCK_MONOTONIC) as an instant on CLOCK_BOOTTIME: the time left
 * now, counted from the boot clock's now. The same conversion as bootStopAt() in
 * src/lease/boot-clock.ts (unit-tested there).
 */
static int64_t boot_stop_at(int64_t stop_mono_ms) {
  int64_t mono = now_ns(CLOCK_MONOTONIC);
  int64_t boot = now_ns(CLOCK_BOOTTIME);
  if (stop_mono_ms > INT64_MAX / NS_PER_MS) return INT64_MAX;
  return boot + (stop_mono_ms * NS_PER_MS - mono);
}

static void arm_timer(int64_t at_ns) {
  struct itimerspec its = {0};
  if (at_ns != INT64_MAX) {
    if (at_ns < 1) at_ns = 1; // zero would disarm it
    its.it_value.tv_sec = at_ns / 1000000000LL;
    its.it_value.tv_nsec = at_ns % 1000000000LL;
  }
  timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

// ---- what the guard says ---------------------------------------------------------------------

static void say(const char *line) {
  if (parent_gone) return;
  // MSG_NOSIGNAL: a leasejob gone is read as EOF, not taken as SIGPIPE.
  size_t len = strlen(line);
  while (len > 0) {
    ssize_t n = send(CONTROL_FD, line, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    line += n;
    len -= (size_t)n;
  }
}

/** `word N\n` into buf (at least 48 bytes). */
static const char *line_with(char *buf, const char *word, int64_t n) {
  char digits[24];
  int i = 0;
  uint64_t u = n < 0 ? (uint64_t)(-(n + 1)) + 1 : (uint64_t)n;
  do digits[i++] = (char)('0' + u % 10);
  while ((u /= 10) > 0);
  size_t w = strlen(word);
  memcpy(buf, word, w);
  buf[w++] = ' ';
  if (n < 0) buf[w++] = '-';
  while (i > 0) buf[w++] = digits[--i];
  buf[w++] = '\n';
  buf[w] = '\0';
  return buf;
}

static const char *errno_name(int e) {
  switch (e) {
  case ENOENT: return "ENOENT";
  case EACCES: return "EACCES";
  case EPERM: return "EPERM";
  case ENOEXEC: return "ENOEXEC";
  case ENOTDIR: return "ENOTDIR";
  case E2BIG: return "E2BIG";
  case ELOOP: return "ELOOP";
  case ENAMETOOLONG: return "ENAMETOOLONG";
  case ETXTBSY: return "ETXTBSY";
  case ENOMEM: return "ENOMEM";
  case EAGAIN: return "EAGAIN";
  case EISDIR: return "EISDIR";
  case EINVAL: return "EINVAL";
  default: return "EUNKNOWN";
  }
}

// ---- the child's group and what escaped it ---------------------------------------------------

static void signal_group(int sig) {
  if (child > 0) kill(-child, sig);
}

struct dirent64_ {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[];
};

/**
 * Signal (0: count) every child of ours found in /proc by parent pid: getdents64 into a static
 * buffer (no opendir, which allocates). For kernels without /proc/<pid>/task/<tid>/children.
 */
static int scan_proc_children(int sig) {
  static char dents[16384];
  static char stat[1024];
  pid_t self = getpid();
  int fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  int live = 0;
  for (;;) {
    long n = syscall(SYS_getdents64, fd, dents, sizeof dents);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      struct dirent64_ *d = (struct dirent64_ *)(void *)(dents + off);
      off += d->reclen;
      if (d->name[0] < '1' || d->name[0] > '9') continue;
      char path[64] = "/proc/";
      size_t nl = strnlen(d->name, 20);
      memcpy(path + 6, d->name, nl);
      memcpy(path + 6 + nl, "/stat", 6);
      int sf = open(path, O_RDONLY | O_CLOEXEC);
      if (sf < 0) continue;
      ssize_t len = read(sf, stat, sizeof stat - 1);
      close(sf);
      if (len <= 0) continue;
      stat[len] = '\0';
      // pid (comm) state ppid ...: the name may hold spaces and parentheses, so from the last ')'.
      char *p = strrchr(stat, ')');
      if (p == NULL || p[1] != ' ' || p[2] == '\0') continue;
      char state = p[2];
      long ppid = 0;
      for (p += 4; *p >= '0' && *p <= '9'; p++) ppid = ppid * 10 + (*p - '0');
      if (ppid != self || state == 'Z' || state == 'X') continue;
      long pid = 0;
      for (const char *q = d->name; *q >= '0' && *q <= '9'; q++) pid = pid * 10 + (*q - '0');
      if (pid > 1) kill((pid_t)pid, sig);
      live++;
    }
  }
  close(fd);
  return live;
}

/**
 * Signal (0: count) every child of ours: as a subreaper, what left the child's group and lost
 * its parent is ours (a setsid daemon, a double fork). Read from /proc/self/task/<pid>/children,
 * one file (the guard has one thread); a zombie not yet reaped counts until its SIGCHLD is.
 */
static int signal_children(int sig) {
  static char list[16384];
  char path[64] = "/proc/self/task/";
  char digits[24];
  int nd = 0;
  for (unsigned long v = (unsigned long)getpid(); nd == 0 || v > 0; v /= 10) digits[nd++] = (char)('0' + v % 10);
  size_t at = strlen(path);
  while (nd > 0) path[at++] = digits[--nd];
  memcpy(path + at, "/children", 10);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return scan_proc_children(sig);
  int live = 0;
  long pid = 0;
  for (;;) {
    ssize_t n = read(fd, list, sizeof list);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i++) {
      if (list[i] >= '0' && list[i] <= '9') {
        pid = pid * 10 + (list[i] - '0');
        continue;
      }
      if (pid > 1) {
        kill((pid_t)pid, sig);
        live++;
      }
      pid = 0;
    }
  }
  if (pid > 1) {
    kill((pid_t)pid, sig);
    live++;
  }
  close(fd);
  return live;
}

static int group_alive(void) { return child > 0 && kill(-child, 0) == 0; }

static _Noreturn void finish(int code) {
  // What the guard said is on the socket already (send returned): leasejob reads it before EOF.
  _exit(code);
}

/**
 * Nothing left to guard. After the child's end the guard stays until leasejob says `done` (what
 * is left, an escapee, is then let go: a daemon the job meant to start) or is gone: so the
 * guard's own end always comes after leasejob is done with it, never racing its last line.
 * Once stopping (the stop point, leasejob gone), it goes when everything is gone.
 */
static void maybe_finish(void) {
  if (child_status < 0) return;
  if (released) finish(child_status);
  int stopping = term_sent || parent_gone;
  if (stopping && !group_alive() && signal_children(0) == 0) finish(child_status);
  if (kill_at_ns != INT64_MAX && now_ns(CLOCK_BOOTTIME) >= kill_at_ns + KILL_SETTLE_MS * NS_PER_MS)
    finish(child_status);
}

static void tick(void) {
  int64_t now = now_ns(CLOCK_BOOTTIME);
  // Something left to stop: the child, its group, or what escaped the group and is ours now.
  if (child > 0 && !released && now >= stop_at_ns && !term_sent &&
      (child_status < 0 || group_alive() || signal_children(0) > 0)) {
    term_sent = 1;
    int64_t k = stop_at_ns + grace_ms * NS_PER_MS;
    if (k < kill_at_ns) kill_at_ns = k;
    say("deadline\n");
    signal_group(SIGTERM);
    signal_children(SIGTERM);
  }
  if (child > 0 && !released && now >= kill_at_ns) {
    signal_group(SIGKILL);
    signal_children(SIGKILL);
  }
  maybe_finish();
  int64_t next = stop_at_ns;
  if (term_sent) {
    next = now + GONE_POLL_MS * NS_PER_MS;
    if (kill_at_ns < next) next = kill_at_ns;
  }
  arm_timer(next);
}

static void reap(void) {
  for (;;) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p <= 0) return;
    if (p != child) continue; // an escapee re-parented to us: nothing to pass on
    char buf[48];
    if (WIFSIGNALED(status)) {
      child_status = 128 + WTERMSIG(status);
      say(line_with(buf, "signal", WTERMSIG(status)));
    } else {
      child_status = WEXITSTATUS(status);
      say(line_with(buf, "exit", child_status));
    }
  }
}

// ---- starting the child ----------------------------------------------------------------------

static void reset_signals(void) {
  struct sigaction dfl = {0};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < 65; s++)
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

/** execvp with the child's own PATH (envp_), as Node's spawn searches it; returns errno. */
static int exec_command(void) {
  if (strchr(file_, '/') != NULL) {
    execve(file_, argv_, envp_);
    return errno;
  }
  const char *search = "/usr/bin:/bin";
  for (size_t i = 0; i < envc_; i++)
    if (strncmp(envp_[i], "PATH=", 5) == 0) search = envp_[i] + 5;
  static char candidate[4096 + 256];
  size_t flen = strlen(file_);
  int saw_eacces = 0;
  for (const char *dir = search;; dir++) {
    const char *end = strchrnul(dir, ':');
    size_t dlen = (size_t)(end - dir);
    if (dlen + flen + 2 <= sizeof candidate) {
      memcpy(candidate, dir, dlen);
      size_t at = dlen;
      if (dlen > 0) candidate[at++] = '/'; // an empty entry is the current directory
      memcpy(candidate + at, file_, flen + 1);
      execve(candidate, argv_, envp_);
      if (errno == EACCES) saw_eacces = 1;
      else if (errno != ENOENT && errno != ENOTDIR) return errno;
    }
    if (*end == '\0') break;
    dir = end;
  }
  return saw_eacces ? EACCES : ENOENT;
}

/** In the forked child: its own session, the user, the parent-death signal, then the command. */
static _Noreturn void become_child(pid_t guard, int report_fd) {
  int err = 0;
  reset_signals();
  if (setsid() < 0) err = errno;
  if (!err && user_set) {
    // As Node's spawn with uid/gid: no supplementary groups (setpriv keeps them when asked).
    if (setgroups(0, NULL) < 0 && errno != EPERM) err = errno;
    if (!err && setgid(gid_) < 0) err = errno;
    if (!err && setuid(uid_) < 0) err = errno;
  }
  // Armed after the ids change (a change of credentials clears it), then the parent checked:
  // a guard that died before the prctl would never send it (runc's getppid check).
  if (!err && prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) err = errno;
  if (!err && getppid() != guard) _exit(EXIT_PARENT_GONE);
  if (!err && cwd_ != NULL && chdir(cwd_) < 0) err = errno;
  if (!err) err = exec_command();
  while (write(report_fd, &err, sizeof err) < 0 && errno == EINTR) {
  }
  _exit(EXIT_SPAWN);
}

static void start_child(void) {
  // Past the stop point (leasejob stopped or starved between its own check and this start): the
  // lease may already be another's, so the command never starts. ETIME tells leasejob why.
  if (now_ns(CLOCK_BOOTTIME) >= stop_at_ns) {
    say("spawn-error ETIME\n");
    finish(EXIT_SPAWN);
  }
  argv_[0] = file_;
  argv_[argc_ + 1] = NULL;
  envp_[envc_] = NULL;
  int report[2];
  if (pipe2(report, O_CLOEXEC) < 0) {
    say("spawn-error EAGAIN\n");
    finish(EXIT_SPAWN);
  }
  pid_t guard = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    say("spawn-error EAGAIN\n");
    finish(EXIT_SPAWN);
  }
  if (pid == 0) become_child(guard, report[1]);
  close(report[1]);
  // Read until the exec closes the pipe (CLOEXEC) or the child reports why it failed: from here
  // the child leads its own group, so a kill of the group reaches it.
  int err = 0;
  ssize_t n;
  while ((n = read(report[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (n == (ssize_t)sizeof err) {
    waitpid(pid, NULL, 0);
    char buf[64] = "spawn-error ";
    strcat(buf, errno_name(err));
    strcat(buf, "\n");
    say(buf);
    finish(EXIT_SPAWN);
  }
  child = pid;
  char buf[48];
  say(line_with(buf, "pid", pid));
}

// ---- the control socket's lines --------------------------------------------------------------
// `keyword[ value]\n`. Values of file, arg, env, cwd are percent-encoded (%25 for '%', %0A for a
// newline; any byte may be, none may decode to NUL) and kept in the arena; the others are short
// ASCII in a scratch buffer. Every bound refused, never grown.

static struct {
  char keyword[KEYWORD_MAX + 1];
  size_t keyword_len;
  int in_value;
  int to_arena;
  char scratch[SCRATCH_MAX + 1];
  char *value;
  size_t value_len, value_cap;
  int hex_digits; // 0: not in an escape; 1, 2: after %, digits read
  unsigned hex;
  int bad;
} ln;

static int started;

static int is_keyword(const char *k) { return strcmp(ln.keyword, k) == 0; }

static int parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out) {
  if (len == 0 || len > 18) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  if (v > max) return -1;
  *out = v;
  return 0;
}

static void begin_value(void) {
  ln.in_value = 1;
  ln.to_arena = !started && (is_keyword("file") || is_keyword("arg") || is_keyword("env") || is_keyword("cwd"));
  if (ln.to_arena) {
    ln.value = arena + arena_used;
    ln.value_cap = ARENA_BYTES - arena_used - 1;
  } else {
    ln.value = ln.scratch;
    ln.value_cap = SCRATCH_MAX;
  }
  ln.value_len = 0;
}

static void push_value(unsigned char c) {
  if (c == 0 && ln.to_arena) ln.bad = 1; // a C string cannot hold it
  if (ln.value_len >= ln.value_cap) ln.bad = 1;
  if (!ln.bad) ln.value[ln.value_len++] = (char)c;
}

/** One complete line: 0 when understood, -1 when not. */
static int dispatch(void) {
  char *v = ln.value;
  size_t len = ln.in_value ? ln.value_len : 0;
  if (ln.in_value && !ln.to_arena) v[len] = '\0';
  uint64_t n;
  if (is_keyword("ping") && ln.in_value) {
    if (parse_u64(v, len, UINT64_MAX / 10, &n) < 0) return -1;
    char buf[48];
    say(line_with(buf, "pong", (int64_t)n));
    return 0;
  }
  if (is_keyword("stop") && ln.in_value) {
    if (len == 1 && v[0] == '-') stop_at_ns = INT64_MAX;
    else if (parse_u64(v, len, INT64_MAX / NS_PER_MS, &n) == 0) stop_at_ns = boot_stop_at((int64_t)n);
    else return -1;
    if (started) tick();
    return 0;
  }
  if (is_keyword("done") && !ln.in_value && started) {
    released = 1;
    maybe_finish();
    return 0;
  }
  if (started) return -1;
  if (ln.to_arena) {
    char *s = arena + arena_used;
    s[len] = '\0';
    arena_used += len + 1;
    if (is_keyword("file") && file_ == NULL) file_ = s;
    else if (is_keyword("cwd") && cwd_ == NULL) cwd_ = s;
    else if (is_keyword("arg") && argc_ < MAX_STRINGS) argv_[1 + argc_++] = s;
    else if (is_keyword("env") && envc_ < MAX_STRINGS) envp_[envc_++] = s;
    else return -1;
    return 0;
  }
  if (is_keyword("grace") && ln.in_value) {
    if (parse_u64(v, len, INT64_MAX / NS_PER_MS / 2, &n) < 0) return -1;
    grace_ms = (int64_t)n;
    return 0;
  }
  if (is_keyword("user") && ln.in_value) {
    char *space = memchr(v, ' ', len);
    uint64_t u, g;
    if (space == NULL || parse_u64(v, (size_t)(space - v), 0xfffffffeu, &u) < 0 ||
        parse_u64(space + 1, len - (size_t)(space - v) - 1, 0xfffffffeu, &g) < 0)
      return -1;
    uid_ = (uint32_t)u;
    gid_ = (uint32_t)g;
    user_set = 1;
    return 0;
  }
  if (is_keyword("start") && !ln.in_value && file_ != NULL) {
    started = 1;
    return 0;
  }
  return -1;
}

/** Feed bytes read from the socket; -1 at the first line not understood. */
static int feed(const char *buf, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)buf[i];
    if (c == '\n') {
      ln.keyword[ln.keyword_len] = '\0';
      int was_started = started;
      int r = ln.bad || ln.hex_digits != 0 || ln.keyword_len == 0 ? -1 : dispatch();
      memset(&ln, 0, sizeof ln);
      if (r < 0) return -1;
      // Read with leasejob's end in the same poll: leasejob died right after the start. Never
      // start a child then (the Node guard checks the same way, after its current read).
      if (started && !was_started) {
        struct pollfd p = {.fd = CONTROL_FD, .events = POLLIN | POLLRDHUP};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) finish(EXIT_PARENT_GONE);
        start_child();
        tick();
      }
    } else if (!ln.in_value) {
      if (c == ' ') begin_value();
      else if (ln.keyword_len < KEYWORD_MAX && c >= 'a' && c <= 'z') ln.keyword[ln.keyword_len++] = (char)c;
      else ln.bad = 1;
    } else if (ln.hex_digits > 0) {
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) ln.bad = 1;
      ln.hex = ln.hex * 16 + (unsigned)(d < 0 ? 0 : d);
      if (++ln.hex_digits == 3) {
        push_value((unsigned char)ln.hex);
        ln.hex_digits = 0;
        ln.hex = 0;
      }
    } else if (c == '%' && ln.to_arena) {
      ln.hex_digits = 1;
    } else {
      push_value(c);
    }
  }
  return 0;
}

// ---- the loop --------------------------------------------------------------------------------

/** leasejob is gone: the child's group is stopped now, with the grace; nothing not started starts. */
static void on_parent_gone(void) {
  if (parent_gone) return;
  parent_gone = 1;
  if (released) {
    maybe_finish();
    return;
  }
  if (child == 0) finish(EXIT_PARENT_GONE);
  int64_t now = now_ns(CLOCK_BOOTTIME);
  if (now < stop_at_ns) stop_at_ns = now;
  tick();
}

int main(void) {
  // The control socket is ours alone: the child must not hold it open (leasejob's EOF is ours).
  if (fcntl(CONTROL_FD, F_SETFD, FD_CLOEXEC) < 0) return EXIT_PROTOCOL;
  sigset_t mask;
  sigemptyset(&mask);
  const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) sigaddset(&mask, forwarded[i]);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  signal(SIGPIPE, SIG_IGN);
  int sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  timer_fd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);
  if (sig_fd < 0 || timer_fd < 0) return EXIT_PROTOCOL;
  // What leaves the child's group and loses its parent becomes ours, not init's.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  struct pollfd fds[3] = {
      {.fd = CONTROL_FD, .events = POLLIN},
      {.fd = sig_fd, .events = POLLIN},
      {.fd = timer_fd, .events = POLLIN},
  };
  static char buf[65536];
  for (;;) {
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return EXIT_PROTOCOL;
    }
    if (fds[0].revents) {
      ssize_t n = read(CONTROL_FD, buf, sizeof buf);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      } else if (n <= 0) {
        fds[0].fd = -1;
        on_parent_gone();
      } else if (feed(buf, (size_t)n) < 0) {
        say("error protocol\n");
        // A leasejob that says what we cannot read is treated as one gone: nothing unguarded.
        if (child == 0) finish(EXIT_PROTOCOL);
        fds[0].fd = -1;
        on_parent_gone();
      }
    }
    if (fds[1].revents) {
      struct signalfd_siginfo si;
      while (read(sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD) reap();
        else if (child > 0 && child_status < 0) signal_group((int)si.ssi_signo);
      }
      maybe_finish();
    }
    if (fds[2].revents) {
      uint64_t expirations;
      if (read(timer_fd, &expirations, sizeof expirations) > 0) tick();
    }
  }
}
