/*
 * hangkit_spank.c - the hpc-hangkit SPANK plugin (thin: all policy is Python).
 *
 * What it does
 *   sbatch/srun/salloc: registers --hang-detect=off|observe|fail and refuses
 *     any other value at submit time. The mode (option, else the site default
 *     from plugstack.conf) goes
 *       - to the prolog/epilog as SPANK_HANGKIT_MODE (spank_job_control_setenv,
 *         local/allocator context), and
 *       - to the batch script and every task as HANGKIT_MODE (spank_setenv,
 *         remote context).
 *   slurmstepd, in each task (task_init, as the job's user, in C): reads the
 *     job environment that the prolog computed ONCE per node from
 *     Settings.to_env() (<scratch_dir>/job_<id>/attempt_<n>/hangkit.env, a
 *     few hundred bytes) and puts it into the task's environment. No
 *     interpreter runs per task. (Not in user_init: there the batch step does
 *     not know its restart count yet, so a requeued job would read the
 *     previous attempt's file.) An interactive step (a normal step whose tasks
 *     lack the batch script's ENVIRONMENT=BATCH: srun in salloc, or alone)
 *     gets <attempt>/step_<id> as HANGKIT_SCRATCH_DIR, made here (0700, as the
 *     user), so steps running at the same time never share rank files.
 *   batch step only (task_init, as the job's user): starts the batch-step
 *     monitor `<bin> slurm-monitor` as a child of the batch script; it gets
 *     SIGTERM when the batch script ends (PR_SET_PDEATHSIG).
 *   srun, interactive steps only (local_user_init, in the srun process, as
 *     the user, after the step is created): starts the step monitor
 *     `<bin> slurm-monitor --step <job>.<step>` as a child of srun, its
 *     output on srun's stderr (the user's terminal), SIGTERM when srun exits.
 *     Not for an srun of a batch script (ENVIRONMENT=BATCH: the batch monitor
 *     watches it) nor for a step whose mode is off. What it watches and does
 *     (fail mode ends the step) is Python: hpc_hangkit.slurm.batch.StepMonitor.
 *
 * plugstack.conf arguments (all optional):
 *   default=off|observe|fail   site default when the user gives no option (off)
 *   scratch_dir=/tmp/hpc-hangkit  must equal scratch_dir in the site TOML
 *                              (`hpc-hangkit admin check` compares them)
 *   bin=/abs/hpc-hangkit       program started as the batch-step and step
 *                              monitors; without it no monitor is started
 *
 * Build: make -C spank   (needs slurm/spank.h: Debian package libslurm-dev).
 * A plugin is tied to the Slurm release it was built against: rebuild after
 * every Slurm upgrade (hpc-hangkit admin build-spank).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <slurm/spank.h>

#ifndef SLURM_BATCH_SCRIPT
#define SLURM_BATCH_SCRIPT (0xfffffffb)
#endif
#ifndef SLURM_MAX_NORMAL_STEP_ID
#define SLURM_MAX_NORMAL_STEP_ID (0xfffffff0)
#endif

SPANK_PLUGIN(hangkit, 1);

#define ENV_FILE "hangkit.env"
/* hpc_hangkit.layout.STEP_DIR_PREFIX */
#define STEP_DIR_PREFIX "step_"
#define ENV_MAX (64 * 1024)

static char *opt_mode = NULL;   /* --hang-detect */
static char *def_mode = NULL;   /* default= */
static char *scratch_dir = NULL;/* scratch_dir= */
static char *bin = NULL;        /* bin= */
static int args_parsed = 0;
static int env_applied = 0;     /* task_init found and applied hangkit.env */

static const char *valid_modes[] = { "off", "observe", "fail", NULL };

static int _valid(const char *m)
{
	for (int i = 0; m && valid_modes[i]; i++)
		if (!strcmp(m, valid_modes[i]))
			return 1;
	return 0;
}

static int _opt_cb(int val, const char *optarg, int remote)
{
	(void) val;
	if (!_valid(optarg)) {
		slurm_error("hpc-hangkit: invalid --hang-detect value '%s': "
			    "use one of off, observe, fail "
			    "(e.g. sbatch --hang-detect=observe job.sh)",
			    optarg ? optarg : "");
		return -1;
	}
	free(opt_mode);
	opt_mode = strdup(optarg);
	return 0;
}

static struct spank_option hk_opt = {
	"hang-detect", "MODE",
	"hpc-hangkit hang detection: off|observe|fail "
	"(observe: detect, capture, report; fail: also requeue once)",
	1, 0, _opt_cb
};

/* plugstack.conf arguments reach every callback; parse them in each one
 * because e.g. the job_script context never calls slurm_spank_init(). A bad
 * argument is logged and ignored: a typo must not block every job. */
static void _parse_args(int ac, char **av)
{
	if (args_parsed)
		return;
	args_parsed = 1;
	for (int i = 0; i < ac; i++) {
		if (!strncmp(av[i], "default=", 8)) {
			if (!_valid(av[i] + 8)) {
				slurm_error("hpc-hangkit: plugstack.conf: bad "
					    "default '%s' (use off, observe or "
					    "fail); using off", av[i] + 8);
				continue;
			}
			free(def_mode);
			def_mode = strdup(av[i] + 8);
		} else if (!strncmp(av[i], "scratch_dir=", 12)) {
			free(scratch_dir);
			scratch_dir = strdup(av[i] + 12);
		} else if (!strncmp(av[i], "bin=", 4)) {
			free(bin);
			bin = strdup(av[i] + 4);
		} else {
			slurm_error("hpc-hangkit: plugstack.conf: unknown "
				    "argument '%s' (ignored)", av[i]);
		}
	}
}

static const char *_mode(void)
{
	if (opt_mode)
		return opt_mode;
	return def_mode ? def_mode : "off";
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	_parse_args(ac, av);
	if (spank_option_register(sp, &hk_opt) != ESPANK_SUCCESS) {
		slurm_error("hpc-hangkit: spank_option_register failed");
		return -1;
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	const char *m;

	_parse_args(ac, av);
	m = _mode();
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		/* prolog/epilog (and slurmctld ones) see SPANK_HANGKIT_MODE */
		if (spank_job_control_setenv(sp, "HANGKIT_MODE", m, 1)
		    != ESPANK_SUCCESS)
			slurm_error("hpc-hangkit: spank_job_control_setenv "
				    "failed");
		break;
	case S_CTX_REMOTE:
		if (spank_setenv(sp, "HANGKIT_MODE", m, 1) != ESPANK_SUCCESS)
			slurm_error("hpc-hangkit: spank_setenv failed");
		break;
	default:
		break;
	}
	return 0;
}

/* Path of this attempt's env file; 0 on success. */
static int _env_path(spank_t sp, char *buf, size_t len)
{
	uint32_t jobid = 0;
	char rc[32] = "";
	long n = 0;

	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS)
		return -1;
	uint32_t restarts = 0;

	/* the batch step's environment gets SLURM_RESTART_COUNT only at task
	 * launch; the item is there from the start */
	if (spank_get_item(sp, S_SLURM_RESTART_COUNT, &restarts)
	    == ESPANK_SUCCESS)
		n = (long) restarts;
	if (spank_getenv(sp, "SLURM_RESTART_COUNT", rc, sizeof(rc))
	    == ESPANK_SUCCESS && rc[0] && strtol(rc, NULL, 10) > n)
		n = strtol(rc, NULL, 10);
	if (n < 0)
		n = 0;
	if (snprintf(buf, len, "%s/job_%u/attempt_%ld/" ENV_FILE,
		     scratch_dir ? scratch_dir : "/tmp/hpc-hangkit",
		     jobid, n) >= (int) len)
		return -1;
	return 0;
}

static int _key_ok(const char *k, size_t n)
{
	if (!n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = k[i];
		if (!((c >= 'A' && c <= 'Z') || c == '_' ||
		      (i && c >= '0' && c <= '9')))
			return 0;
	}
	return 1;
}

static int strip_only = 0;      /* step with --hang-detect=off in an armed job */
/* an interactive step's id (srun outside a batch script): its ranks write to
 * <attempt scratch>/step_<id> (hpc_hangkit.layout.step_scratch_dir), so steps
 * that run at the same time in one allocation never share a directory */
static int own_step = 0;
static uint32_t own_step_id = 0;

#define PP_MAX (128 * 1024)

/* The job's current PYTHONPATH into a heap buffer: 1 found, 0 unset,
 * -1 unreadable (too long, or no memory): then PYTHONPATH is left alone. */
static int _get_pythonpath(spank_t sp, char **out)
{
	spank_err_t rc;

	*out = malloc(PP_MAX);
	if (!*out)
		return -1;
	rc = spank_getenv(sp, "PYTHONPATH", *out, PP_MAX);
	if (rc == ESPANK_SUCCESS)
		return (*out)[0] ? 1 : 0;
	if (rc == ESPANK_ENV_NOEXIST) {
		(*out)[0] = '\0';
		return 0;
	}
	free(*out);
	*out = NULL;
	return -1;
}

/* One KEY=VALUE line. PYTHONPATH is prepended to the user's, HANGKIT_MODE
 * is the plugin's own, HANGKIT_SCRATCH_DIR always wins, anything else the
 * user set in the job environment wins over the site value. */
static void _apply(spank_t sp, char *key, char *val)
{
	char *old = NULL;
	int have;

	if (strip_only) {
		/* take the boot directory back out of an inherited PYTHONPATH */
		size_t vl = strlen(val);
		if (strcmp(key, "PYTHONPATH"))
			return;
		if (_get_pythonpath(sp, &old) == 1 && !strncmp(old, val, vl)) {
			if (old[vl] == '\0')
				spank_unsetenv(sp, "PYTHONPATH");
			else if (old[vl] == ':')
				spank_setenv(sp, "PYTHONPATH", old + vl + 1, 1);
		}
		free(old);
		return;
	}
	if (!strcmp(key, "HANGKIT_MODE"))
		return;
	if (!strcmp(key, "PYTHONPATH")) {
		size_t vl = strlen(val);
		have = _get_pythonpath(sp, &old);
		if (have < 0) {
			slurm_error("hpc-hangkit: PYTHONPATH unreadable or over %d "
				    "bytes: this task is not armed", PP_MAX);
		} else if (have == 0) {
			spank_setenv(sp, key, val, 1);
		} else if (!(!strncmp(old, val, vl) &&
			     (old[vl] == ':' || old[vl] == '\0'))) {
			/* not already first (inherited from the batch script) */
			char *both = malloc(vl + strlen(old) + 2);
			if (both) {
				sprintf(both, "%s:%s", val, old);
				spank_setenv(sp, key, both, 1);
				free(both);
			}
		}
		free(old);
		return;
	}
	if (!strcmp(key, "HANGKIT_SCRATCH_DIR") && own_step) {
		char step_dir[PATH_MAX];
		if (snprintf(step_dir, sizeof(step_dir), "%s/" STEP_DIR_PREFIX "%u",
			     val, own_step_id) >= (int) sizeof(step_dir)) {
			slurm_error("hpc-hangkit: step scratch path too long: "
				    "this task is not armed");
			return;
		}
		/* as the job's user, in the attempt directory the prolog
		 * gave the user; a second task of the node finds it made */
		if (mkdir(step_dir, 0700) && errno != EEXIST)
			slurm_error("hpc-hangkit: cannot make %s: %m", step_dir);
		spank_setenv(sp, key, step_dir, 1);
		return;
	}
	spank_setenv(sp, key, val, !strcmp(key, "HANGKIT_SCRATCH_DIR"));
}

static int _apply_env_file(spank_t sp)
{
	char path[PATH_MAX];
	char *buf, *line, *save = NULL;
	ssize_t n, got = 0;
	struct stat st;
	int fd;

	if (_env_path(sp, path, sizeof(path)))
		return -1;
	/* never follow a symlink; read as the job's user (task_init) */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		int task = 0;
		/* once per step and node, not once per task */
		if (!strip_only && (spank_get_item(sp, S_TASK_ID, &task)
				    != ESPANK_SUCCESS || task == 0))
			slurm_info("hpc-hangkit: no job environment at %s (%m):"
				   " is the hpc-hangkit prolog configured? "
				   "Ranks of this step are not armed", path);
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > ENV_MAX) {
		slurm_error("hpc-hangkit: %s is not a small regular file; "
			    "ignored", path);
		close(fd);
		return -1;
	}
	buf = calloc(1, ENV_MAX + 1);
	if (!buf) {
		close(fd);
		return -1;
	}
	while (got < ENV_MAX && (n = read(fd, buf + got, ENV_MAX - got)) > 0)
		got += n;
	close(fd);
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq || line[0] == '#' || !_key_ok(line, eq - line))
			continue;
		*eq = '\0';
		_apply(sp, line, eq + 1);
	}
	free(buf);
	return 0;
}

static int _drop_from_monitor_env(const char *kv)
{
	static const char *drop[] = {
		"PYTHONPATH=", "SLURM_PROCID=", "SLURM_LOCALID=", "RANK=",
		"LOCAL_RANK=", "PMI_RANK=", "PMIX_RANK=",
		"OMPI_COMM_WORLD_RANK=", NULL
	};
	for (int i = 0; drop[i]; i++)
		if (!strncmp(kv, drop[i], strlen(drop[i])))
			return 1;
	return 0;
}

/* Batch step, in the task process (already the job's user), just before the
 * batch script is exec'd: fork the monitor. It stays a child of the batch
 * script so that the step's process tracking owns it, and gets SIGTERM when
 * the batch script exits. A failure here never affects the job. */
static void _start_monitor(spank_t sp)
{
	char **env = NULL, **menv;
	size_t n = 0, k = 0;
	pid_t parent = getpid(), pid;

	if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || !env)
		return;
	while (env[n])
		n++;
	menv = calloc(n + 1, sizeof(char *));
	if (!menv)
		return;
	for (size_t i = 0; i < n; i++)
		if (!_drop_from_monitor_env(env[i]))
			menv[k++] = env[i];
	menv[k] = NULL;

	pid = fork();
	if (pid < 0) {
		slurm_error("hpc-hangkit: fork for the monitor failed: %m");
		free(menv);
		return;
	}
	if (pid == 0) {
		int nul;
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(0);
		nul = open("/dev/null", O_RDONLY);
		if (nul >= 0) {
			dup2(nul, 0);
			if (nul > 2)
				close(nul);
		}
		/* the batch script's signal dispositions are not ours */
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		execle(bin, bin, "slurm-monitor", (char *) NULL, menv);
		fprintf(stderr, "hpc-hangkit: cannot start the monitor %s: "
			"%s\n", bin, strerror(errno));
		_exit(127);
	}
	free(menv);
}

/* The child of a fork in a monitor-starting process: keep only stdin
 * (/dev/null), stdout and stderr, and give it default signal handling (the
 * parent's mask and ignored signals survive exec). Async-signal-safe calls
 * only: the parent (srun) has threads. */
static void _child_fds_and_signals(int out_to_err)
{
	sigset_t none;
	int nul = open("/dev/null", O_RDONLY);
	long maxfd = sysconf(_SC_OPEN_MAX);

	if (nul >= 0) {
		dup2(nul, 0);
		if (nul > 2)
			close(nul);
	}
	if (out_to_err)
		dup2(2, 1);
	if (maxfd < 0 || maxfd > 65536)
		maxfd = 65536;
	for (long fd = 3; fd < maxfd; fd++)
		close((int) fd);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGCHLD, SIG_DFL);
}

/* srun (local context, as the user, the step allocated, tasks not yet
 * launched): start `<bin> slurm-monitor --step J.S` for an interactive step.
 * Its stderr (and stdout) is srun's stderr, the user's terminal, so srun's
 * own stdout carries only the tasks' output; it gets SIGTERM when srun
 * exits (PR_SET_PDEATHSIG). An srun in a batch script (ENVIRONMENT=BATCH,
 * which sbatch sets and the script's sruns inherit) is skipped here, before
 * any interpreter starts: the batch monitor watches those steps. What the
 * monitor does is Python's (hpc_hangkit.slurm.batch.StepMonitor). */
static void _start_step_monitor(spank_t sp)
{
	extern char **environ;
	char **menv, step[48], mode_kv[32];
	const char *env_kind = getenv("ENVIRONMENT");
	uint32_t jobid = 0, stepid = 0;
	size_t n = 0, k = 0;
	pid_t parent = getpid(), pid;

	if (env_kind && !strcmp(env_kind, "BATCH"))
		return;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
		return;
	if (stepid > SLURM_MAX_NORMAL_STEP_ID)  /* batch, extern, interactive */
		return;
	snprintf(step, sizeof(step), "%u.%u", jobid, stepid);
	snprintf(mode_kv, sizeof(mode_kv), "HANGKIT_MODE=%s", _mode());
	while (environ && environ[n])
		n++;
	menv = calloc(n + 2, sizeof(char *));
	if (!menv)
		return;
	for (size_t i = 0; i < n; i++)
		if (!_drop_from_monitor_env(environ[i]) &&
		    strncmp(environ[i], "HANGKIT_MODE=", 13))
			menv[k++] = environ[i];
	menv[k++] = mode_kv;
	menv[k] = NULL;

	pid = fork();
	if (pid < 0) {
		slurm_error("hpc-hangkit: fork for the step monitor failed: %m");
		free(menv);
		return;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(0);
		_child_fds_and_signals(1);
		execle(bin, bin, "slurm-monitor", "--step", step, (char *) NULL,
		       menv);
		_exit(127);
	}
	free(menv);
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
	_parse_args(ac, av);
	if (spank_context() != S_CTX_LOCAL || !bin || !strcmp(_mode(), "off"))
		return 0;
	_start_step_monitor(sp);
	return 0;
}

/* A step of its own directory: a normal step (not batch, extern or
 * interactive-shell) whose tasks were not started from a batch script. The
 * batch script's environment (ENVIRONMENT=BATCH, set by sbatch) reaches the
 * tasks of its sruns: those share the attempt directory, which the batch
 * monitor watches. The same rule decides whether srun starts a step monitor
 * (_start_step_monitor). */
static int _interactive_step(spank_t sp, uint32_t stepid)
{
	char kind[16] = "";

	if (stepid > SLURM_MAX_NORMAL_STEP_ID)
		return 0;
	if (spank_getenv(sp, "ENVIRONMENT", kind, sizeof(kind)) == ESPANK_SUCCESS
	    && !strcmp(kind, "BATCH"))
		return 0;
	return 1;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	uint32_t stepid = 0;

	_parse_args(ac, av);
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	if (!strcmp(_mode(), "off")) {
		/* an off step of an armed job inherits the batch script's
		 * PYTHONPATH: strip the boot dir (quietly if there is no file) */
		char path[PATH_MAX];
		if (!_env_path(sp, path, sizeof(path)) && !access(path, R_OK)) {
			strip_only = 1;
			_apply_env_file(sp);
			strip_only = 0;
		}
		return 0;
	}
	if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
		stepid = SLURM_BATCH_SCRIPT;
	own_step = _interactive_step(sp, stepid);
	own_step_id = stepid;
	if (_apply_env_file(sp) == 0)
		env_applied = 1;
	if (!bin || !env_applied)
		return 0;
	if (stepid == SLURM_BATCH_SCRIPT)
		_start_monitor(sp);
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void) sp;
	_parse_args(ac, av);
	return 0;
}
