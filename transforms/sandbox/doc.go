// Package sandbox runs untrusted Python programs (model-written solutions
// with their tests) in a separate, confined process and reports how they
// ended.
//
// Every program runs as its own python3 process, never inside the caller,
// with these confinements:
//
//   - Resource limits (setrlimit, hard and soft alike, so the program
//     cannot raise them): CPU time, address space, size of any file written,
//     open files, core dumps off, and the number of processes (RLIMIT_NPROC),
//     set by a short bootstrap that runs before the program's first line.
//   - A wall-clock timeout: the process group is killed with SIGKILL when it
//     expires or when the caller's context ends.
//   - A private working directory (mode 0700, also HOME and TMPDIR), removed
//     afterwards; the environment is replaced, so nothing of the caller's
//     environment (credentials included) reaches the program.
//   - Namespaces where the machine allows them: a new network namespace
//     (only an unconfigured loopback: every connection fails) and a new PID
//     namespace (the program is its init; when it dies the kernel kills
//     every process it left). As root the program also runs under its own
//     unprivileged uid from a pool (one uid per concurrent slot), so that
//     file permissions keep it out of the system and RLIMIT_NPROC counts
//     only its own processes; otherwise a user namespace maps the caller's
//     uid. When namespaces cannot be created, New logs a notice once and
//     the bootstrap's audit hook refuses sockets instead.
//   - An audit hook (sys.addaudithook) refuses writes, renames, removals and
//     directory creation outside the working directory (and /dev/null);
//     this covers world-writable places such as /tmp that file permissions
//     leave open. The hook is a policy layer, not a security boundary (a
//     program with ctypes can step around it); the kernel limits above are.
//
// Results distinguish a clean exit, a failing exit (an assertion error,
// an exception, MemoryError under the address-space limit), a timeout (wall
// clock or CPU) and a failure of the sandbox itself.
//
// The program builders (MBPPProgram, HumanEvalProgram) and ExtractCode turn
// a model response and a benchmark's tests into one program whose clean
// exit means every test passed.
package sandbox
