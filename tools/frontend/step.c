/* step.c — a build step: a piece of work run in a child process, shown as it runs.
 *
 * Progress (build steps, with a timer) goes to stderr when stderr is a terminal; otherwise the
 * front end says nothing but errors. INGOT_PROGRESS=1 prints the step lines anyway,
 * INGOT_PROGRESS=0 never. On a terminal a step's own output is held back until it ends, so that
 * the timer line is not torn by it. */
#define _GNU_SOURCE
#include "frontend.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum fe_progress fe_progress = FE_PROGRESS_NONE;

void fe_progress_init(void) {
    const char *v = getenv("INGOT_PROGRESS");
    int tty = isatty(2);
    if (v && strcmp(v, "0") == 0) fe_progress = FE_PROGRESS_NONE;
    else if (v && strcmp(v, "1") == 0) fe_progress = tty ? FE_PROGRESS_TTY : FE_PROGRESS_PLAIN;
    else fe_progress = tty ? FE_PROGRESS_TTY : FE_PROGRESS_NONE;
}

void fe_note(const char *fmt, ...) {
    if (fe_progress == FE_PROGRESS_NONE) return;
    va_list ap;
    va_start(ap, fmt);
    fe_vsay(fmt, ap);
    va_end(ap);
}

long long fe_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* the exit status of a child as the shell reports it: its code, or 128 + the signal */
static int exit_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

static int wait_for(pid_t pid) {
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return exit_status(status);
}

int fe_exec_work(void *argv) {
    char *const *args = argv;
    execvp(args[0], args);
    fprintf(stderr, "ingot: cannot run %s: %s\n", args[0], strerror(errno));
    return 127;
}

int fe_run(char *const argv[], const char *out_path) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (out_path && *out_path) {
            int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0 || dup2(fd, 1) < 0) {
                fprintf(stderr, "ingot: cannot write %s: %s\n", out_path, strerror(errno));
                _exit(127);
            }
        }
        _exit(fe_exec_work((void *)argv));
    }
    return wait_for(pid);
}

int fe_temp_file(const char *what, char *path, size_t cap) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    if (snprintf(path, cap, "%s/ingot-%s-XXXXXX", dir, what) >= (int)cap) fe_die("TMPDIR is too long: %s", dir);
    const int fd = mkstemp(path);
    if (fd < 0) fe_die("cannot create a file in %s: %s", dir, strerror(errno));
    return fd;
}

/* The held-back output of the step on a terminal, removed if the front end is interrupted. */
static char held_log[PATH_MAX];

static void interrupted(int sig) {
    if (held_log[0]) unlink(held_log);
    static const char newline[] = "\n";
    if (write(2, newline, 1) < 0) { /* nothing more can be said */
    }
    _exit(sig == SIGINT ? 130 : 143);
}

/* forks WORK(CTX) with stdout and stderr to LOG_FD (-1: unchanged) */
static pid_t start_work(int (*work)(void *), void *ctx, int log_fd) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) fe_die("cannot start a process: %s", strerror(errno));
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (log_fd >= 0 && (dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)) _exit(127);
        int rc = work(ctx);
        fflush(NULL);
        _exit(rc);
    }
    return pid;
}

/* the step with a timer redrawn every second; the step's output after it */
static int step_on_terminal(const char *label, int (*work)(void *), void *ctx) {
    long long t0 = fe_now_ms();
    const int log_fd = fe_temp_file("step", held_log, sizeof held_log);
    signal(SIGINT, interrupted);
    signal(SIGTERM, interrupted);
    fprintf(stderr, "\r\033[Kingot: %s ...", label);
    pid_t pid = start_work(work, ctx, log_fd);
    int status = 0, rc = -1;
    long long shown = 0;
    while (rc < 0) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid) rc = exit_status(status);
        else if (done < 0 && errno != EINTR) rc = 1;
        else {
            struct timespec tick = {0, 50 * 1000000};
            nanosleep(&tick, NULL);
            long long s = (fe_now_ms() - t0) / 1000;
            if (s > shown) fprintf(stderr, "\r\033[Kingot: %s ... %llds", label, shown = s);
        }
    }
    long long ms = fe_now_ms() - t0;
    if (rc == 0) fprintf(stderr, "\r\033[Kingot: %s (%lld.%01llds)\n", label, ms / 1000, ms % 1000 / 100);
    else fprintf(stderr, "\r\033[Kingot: %s failed\n", label);
    char buf[1 << 14];
    ssize_t n;
    lseek(log_fd, 0, SEEK_SET);
    while ((n = read(log_fd, buf, sizeof buf)) > 0) fwrite(buf, 1, (size_t)n, stderr);
    close(log_fd);
    unlink(held_log);
    held_log[0] = 0;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    return rc;
}

void fe_step(const char *label, int (*work)(void *ctx), void *ctx) {
    int rc;
    if (fe_progress == FE_PROGRESS_TTY) rc = step_on_terminal(label, work, ctx);
    else {
        if (fe_progress == FE_PROGRESS_PLAIN) fprintf(stderr, "ingot: %s\n", label);
        rc = wait_for(start_work(work, ctx, -1));
    }
    /* the step said why (make, the generator); exit status 2 is kept for usage errors */
    if (rc != 0) {
        if (fe_progress == FE_PROGRESS_PLAIN) fprintf(stderr, "ingot: %s failed\n", label);
        exit(1);
    }
}
