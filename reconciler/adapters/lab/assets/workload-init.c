/*
 * /init of a lab workload guest: the one program the guest runs, as process 1.
 *
 * It keeps every vCPU busy for a share of each 100 ms slice ("cpu", percent of each vCPU) and
 * writes to memory at a rate ("dirty", MiB per second) over a working set ("wss", MiB) that it
 * fills at start, so the working set counts as used memory even while nothing is written. The
 * busy share may follow a pattern: "steady"; "spike", "peak" percent for "on" seconds every
 * "every" seconds; or "ramp", from "cpu" to "to" percent over "over" seconds, then held.
 *
 * Its settings come from the kernel command line as workload.KEY=VALUE (names with a dot, which
 * the kernel leaves to others), and change while it runs through lines on the console:
 *
 *     set id=7 cpu=80 dirty=0  ->  workload ok id=7 cpu=80 dirty=0 wss=48 pattern=steady busy=80 ...
 *     get id=8                 ->  workload ok id=8 cpu=80 dirty=0 wss=48 pattern=steady busy=80 ...
 *     set id=9 cpu=120         ->  workload error id=9: cpu must be 0-100, not 120
 *
 * Keys a line leaves out keep their values; a line with an error changes nothing. Setting "cpu"
 * or any setting of the pattern starts the pattern again from that moment. "busy" is the share
 * the pattern asks for at the moment of the answer, "written" the MiB written since the start.
 * Once started it says "workload ready", and every 5 s what it does.
 *
 * The lab builds it with `gcc -static -O2 -pthread` (reconciler/adapters/lab/guest_image.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#define SLICE 0.1          /* seconds: the busy share is kept within every slice */
#define PAGE 4096
#define REPORT_EVERY 5.0   /* seconds between reports on the console */
#define MEMORY_MARGIN 8    /* MiB the kernel and this program keep beside the working set */
#define CATCH_UP 0.03      /* seconds of writes the writer makes up for when it wakes late */

enum pattern { STEADY, SPIKE, RAMP };
static const char *const pattern_names[] = {"steady", "spike", "ramp"};

struct settings {
    long cpu, dirty, wss; /* percent of each vCPU, MiB/s, MiB */
    long pattern;
    long peak, on, every; /* spike: percent, seconds, seconds */
    long to, over;        /* ramp: percent, seconds */
    double since;         /* when the pattern started (CLOCK_MONOTONIC seconds) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct settings current = {
    .cpu = 0, .dirty = 0, .wss = 16, .pattern = STEADY,
    .peak = 100, .on = 5, .every = 60, .to = 100, .over = 60,
};
static volatile long pages_written;     /* by the writer, read for the reports */
static volatile long wss_in_use;        /* MiB the writer holds now */
static volatile int writer_failed;      /* the writer could not map the working set asked for */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_until(double when)
{
    struct timespec t = {.tv_sec = (time_t)when};
    t.tv_nsec = (long)((when - (double)t.tv_sec) * 1e9);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
    }
}

static struct settings snapshot(void)
{
    pthread_mutex_lock(&lock);
    struct settings s = current;
    pthread_mutex_unlock(&lock);
    return s;
}

/* The busy share, 0 to 1, that the settings ask for at time t. */
static double busy_share(const struct settings *s, double t)
{
    double elapsed = t - s->since, percent = (double)s->cpu;
    if (s->pattern == SPIKE) {
        long ms = (long)(elapsed * 1000.0) % (s->every * 1000);
        if (ms < s->on * 1000)
            percent = (double)s->peak;
    } else if (s->pattern == RAMP) {
        if (elapsed >= (double)s->over)
            percent = (double)s->to;
        else
            percent += (double)(s->to - s->cpu) * elapsed / (double)s->over;
    }
    return percent / 100.0;
}

/* One per vCPU, pinned to it: busy for the share of each slice, asleep for the rest. */
static void *burner(void *arg)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((int)(long)arg, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    double next = now();
    for (;;) {
        double start = now();
        if (next < start - SLICE)
            next = start; /* far behind (the guest was paused): start afresh */
        struct settings s = snapshot();
        double busy_until = start + busy_share(&s, start) * SLICE;
        while (now() < busy_until) {
        }
        next += SLICE;
        sleep_until(next);
    }
    return NULL;
}

/* A working set of mib MiB, every page written once, or NULL when it cannot be had. */
static unsigned char *map_working_set(long mib, uint64_t stamp)
{
    size_t size = (size_t)mib << 20;
    unsigned char *buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return NULL;
    for (size_t at = 0; at < size; at += PAGE)
        *(volatile uint64_t *)(buf + at) = stamp; /* not zero: a zero page would cost nothing to move */
    return buf;
}

/* Writes one word in each of "dirty" MiB worth of pages a second, going round the working set. */
static void *writer(void *arg)
{
    (void)arg;
    unsigned char *buf = NULL;
    long mib = 0;
    size_t at = 0;
    uint64_t stamp = 1;
    double due = 0, last = now();
    for (;;) {
        struct settings s = snapshot();
        if (s.wss != mib) { /* the old set goes first: the check made room for the new one */
            if (buf != NULL)
                munmap(buf, (size_t)mib << 20);
            buf = map_working_set(s.wss, stamp);
            mib = buf != NULL ? s.wss : 0;
            wss_in_use = mib;
            writer_failed = buf == NULL;
            at = 0;
        }
        double t = now();
        due += (double)s.dirty * (double)((1 << 20) / PAGE) * (t - last);
        last = t;
        if (s.dirty == 0 || buf == NULL)
            due = 0;
        /* Late by a little (the machine's scheduler), it catches up; held off the vCPU for
           longer (auto-converge's throttle, a pause), what it could not write is not written:
           like a guest whose writes come from its own work, it writes less while it runs less. */
        if (due > (double)s.dirty * 256.0 * CATCH_UP)
            due = (double)s.dirty * 256.0 * CATCH_UP;
        size_t size = (size_t)mib << 20;
        while (due >= 1.0) {
            *(volatile uint64_t *)(buf + at) = ++stamp;
            at += PAGE;
            if (at >= size)
                at = 0;
            due -= 1.0;
            pages_written++;
        }
        sleep_until(t + (s.dirty > 0 ? 0.01 : SLICE)); /* an idle guest wakes seldom */
    }
    return NULL;
}

/*
 * A process of its own on one vCPU that wakes every TICK seconds (every SLICE while nothing is
 * written), so the vCPU switches address spaces at least that often. Under TCG (QEMU 7.2) a
 * guest that wrote memory while it migrated arrived corrupted (its kernel panicked on the target
 * host) unless its vCPUs switched address spaces often: a switch flushes the emulated TLB, whose
 * entries otherwise let writes escape the migration's tracking of dirty pages. This program's
 * threads share one address space, so without these processes a vCPU would hardly ever switch.
 * Each wake costs the machine some CPU, hence the slower pace while the guest writes nothing.
 */
#define TICK 0.01
static volatile long *writing; /* shared with the ticking processes: is "dirty" above 0? */
static void switch_address_spaces(long cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((int)cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
    for (double next = now();; next += *writing ? TICK : SLICE) {
        if (next < now() - 1.0)
            next = now();
        sleep_until(next);
    }
}

static int parse_long(const char *text, long *out)
{
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0')
        return -1;
    *out = value;
    return 0;
}

/* Applies "key=value" words to next; 0, or -1 with the reason in why. */
static int apply_word(struct settings *next, const char *word, char *why, size_t why_size,
                      int *restart)
{
    const char *eq = strchr(word, '=');
    if (eq == NULL) {
        snprintf(why, why_size, "%s is not key=value", word);
        return -1;
    }
    char key[32];
    size_t key_len = (size_t)(eq - word);
    if (key_len == 0 || key_len >= sizeof key) {
        snprintf(why, why_size, "%s is not key=value", word);
        return -1;
    }
    memcpy(key, word, key_len);
    key[key_len] = '\0';
    const char *text = eq + 1;
    if (strcmp(key, "pattern") == 0) {
        for (long p = STEADY; p <= RAMP; p++) {
            if (strcmp(text, pattern_names[p]) == 0) {
                next->pattern = p;
                *restart = 1;
                return 0;
            }
        }
        snprintf(why, why_size, "pattern must be steady, spike or ramp, not %s", text);
        return -1;
    }
    static const struct {
        const char *name;
        size_t offset;
        long min, max;
        int restarts;
    } keys[] = {
        {"cpu", offsetof(struct settings, cpu), 0, 100, 1},
        {"dirty", offsetof(struct settings, dirty), 0, 100000, 0},
        {"wss", offsetof(struct settings, wss), 1, 1 << 20, 0},
        {"peak", offsetof(struct settings, peak), 0, 100, 1},
        {"on", offsetof(struct settings, on), 0, 86400, 1},
        {"every", offsetof(struct settings, every), 1, 86400, 1},
        {"to", offsetof(struct settings, to), 0, 100, 1},
        {"over", offsetof(struct settings, over), 1, 86400, 1},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (strcmp(key, keys[i].name) != 0)
            continue;
        long value;
        if (parse_long(text, &value) != 0 || value < keys[i].min || value > keys[i].max) {
            snprintf(why, why_size, "%s must be %ld-%ld, not %s", key, keys[i].min, keys[i].max,
                     text);
            return -1;
        }
        *(long *)((char *)next + keys[i].offset) = value;
        *restart |= keys[i].restarts;
        return 0;
    }
    snprintf(why, why_size, "unknown setting %s", key);
    return -1;
}

/* Checks what apply_word cannot see alone; 0, or -1 with the reason in why. */
static int check(const struct settings *next, const struct settings *before, char *why,
                 size_t why_size)
{
    if (next->on > next->every) {
        snprintf(why, why_size, "on (%ld s) must not exceed every (%ld s)", next->on, next->every);
        return -1;
    }
    if (next->wss != before->wss) {
        struct sysinfo info;
        long free_mib = 0;
        if (sysinfo(&info) == 0)
            free_mib = (long)((unsigned long long)info.freeram * info.mem_unit >> 20);
        if (next->wss + MEMORY_MARGIN > free_mib + wss_in_use) {
            snprintf(why, why_size, "wss %ld MiB does not fit: %ld MiB are free beside the %ld in use",
                     next->wss, free_mib, (long)wss_in_use);
            return -1;
        }
    }
    return 0;
}

static void describe(char *out, size_t size, const struct settings *s)
{
    int n = snprintf(out, size, "cpu=%ld dirty=%ld wss=%ld pattern=%s", s->cpu, s->dirty, s->wss,
                     pattern_names[s->pattern]);
    if (s->pattern == SPIKE)
        snprintf(out + n, size - (size_t)n, " peak=%ld on=%ld every=%ld", s->peak, s->on, s->every);
    else if (s->pattern == RAMP)
        snprintf(out + n, size - (size_t)n, " to=%ld over=%ld", s->to, s->over);
}

/* One console line: "set id=N key=value ..." or "get id=N". */
static void handle_line(char *line)
{
    char *words[32];
    int count = 0;
    for (char *word = strtok(line, " \t\r\n"); word != NULL && count < 32; word = strtok(NULL, " \t\r\n"))
        words[count++] = word;
    if (count == 0)
        return;
    const char *id = "-";
    if (count > 1 && strncmp(words[1], "id=", 3) == 0)
        id = words[1] + 3;
    int set = strcmp(words[0], "set") == 0;
    if (!set && strcmp(words[0], "get") != 0) {
        printf("workload error id=%s: say set or get, not %s\n", id, words[0]);
        return;
    }
    char why[160] = "";
    int restart = 0, failed = 0;
    pthread_mutex_lock(&lock);
    struct settings before = current, next = current;
    for (int i = strcmp(id, "-") == 0 ? 1 : 2; set && i < count && !failed; i++)
        failed = apply_word(&next, words[i], why, sizeof why, &restart) != 0;
    if (!failed)
        failed = check(&next, &before, why, sizeof why) != 0;
    if (!failed) {
        if (restart)
            next.since = now();
        current = next;
        *writing = next.dirty > 0;
        writer_failed = 0;
    }
    pthread_mutex_unlock(&lock);
    if (failed) {
        printf("workload error id=%s: %s\n", id, why);
        return;
    }
    char text[200];
    describe(text, sizeof text, &next);
    printf("workload ok id=%s %s busy=%.0f written=%ld\n", id, text,
           busy_share(&next, now()) * 100.0, pages_written / ((1 << 20) / PAGE));
}

/* The settings on the kernel command line (workload.KEY=VALUE); errors are said and skipped. */
static void read_command_line(void)
{
    char line[4096] = "";
    FILE *file = fopen("/proc/cmdline", "r");
    if (file != NULL) {
        if (fgets(line, sizeof line, file) == NULL)
            line[0] = '\0';
        fclose(file);
    }
    int restart = 0;
    for (char *word = strtok(line, " \t\n"); word != NULL; word = strtok(NULL, " \t\n")) {
        if (strncmp(word, "workload.", 9) != 0)
            continue;
        char why[160];
        struct settings next = current;
        if (apply_word(&next, word + 9, why, sizeof why, &restart) == 0 &&
            check(&next, &current, why, sizeof why) == 0)
            current = next;
        else
            printf("workload error: kernel command line: %s\n", why);
    }
    current.since = now();
}

int main(void)
{
    if (getpid() == 1) /* the guest's init; run elsewhere (a test), it leaves /proc alone */
        mount("proc", "/proc", "proc", 0, NULL);
    setvbuf(stdout, NULL, _IOLBF, 0);
    read_command_line();
    cpu_set_t online;
    CPU_ZERO(&online);
    if (sched_getaffinity(0, sizeof online, &online) != 0)
        CPU_SET(0, &online);
    long vcpus = CPU_COUNT(&online);
    static volatile long always = 1; /* without a shared page: tick fast all the time */
    writing = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (writing == MAP_FAILED)
        writing = &always;
    *writing = current.dirty > 0;
    for (long cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &online) && fork() == 0)
            switch_address_spaces(cpu);
    pthread_t thread;
    pthread_create(&thread, NULL, writer, NULL);
    for (long cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &online))
            pthread_create(&thread, NULL, burner, (void *)cpu);
    char text[200];
    struct settings s = snapshot();
    describe(text, sizeof text, &s);
    printf("workload ready: %ld vCPUs, %s\n", vcpus, text);

    double started = now(), report = started + REPORT_EVERY;
    char line[512];
    size_t used = 0;
    for (;;) {
        struct pollfd console = {.fd = 0, .events = POLLIN};
        int wait_ms = (int)((report - now()) * 1000.0);
        if (poll(&console, 1, wait_ms > 0 ? wait_ms : 0) > 0) {
            ssize_t got = read(0, line + used, sizeof line - 1 - used);
            if (got <= 0) {
                sleep_until(now() + 0.1); /* no console to read: keep working */
            } else {
                used += (size_t)got;
                line[used] = '\0';
                char *end;
                while ((end = strchr(line, '\n')) != NULL) {
                    *end = '\0';
                    handle_line(line);
                    used -= (size_t)(end + 1 - line);
                    memmove(line, end + 1, used + 1);
                }
                if (used == sizeof line - 1)
                    used = 0; /* a line too long for anyone: dropped */
            }
        }
        double t = now();
        if (t >= report) {
            s = snapshot();
            describe(text, sizeof text, &s);
            printf("workload t=%.0f busy=%.0f%% written=%ldMiB %s%s\n", t - started,
                   busy_share(&s, t) * 100.0, pages_written / ((1 << 20) / PAGE), text,
                   writer_failed ? " (wss could not be mapped)" : "");
            report += REPORT_EVERY;
            if (report < t)
                report = t + REPORT_EVERY;
        }
    }
}
