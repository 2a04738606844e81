package collective

import (
	"net"
	"os"
	"strconv"
	"strings"
)

// Env is a rank's place in the job, as the launcher gives it.
type Env struct {
	Rank       int
	WorldSize  int
	LocalRank  int
	MasterAddr string // host of the store, served by rank 0
	MasterPort int
	// Source is "torchrun" or "slurm": which variables supplied it.
	Source string
}

// StoreAddr is MASTER_ADDR:MASTER_PORT.
func (e Env) StoreAddr() string {
	return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort))
}

// EnvFromOS reads the process environment; see ParseEnv.
func EnvFromOS() (Env, error) { return ParseEnv(os.Getenv) }

// ParseEnv reads the launcher contract through getenv: RANK, WORLD_SIZE,
// LOCAL_RANK (default 0), MASTER_ADDR and MASTER_PORT, as torchrun sets
// them. When RANK and WORLD_SIZE are both unset, Slurm's SLURM_PROCID,
// SLURM_NTASKS and SLURM_LOCALID stand in for them (MASTER_ADDR and
// MASTER_PORT are still required: srun does not choose a store). The
// store listens on MASTER_PORT, or on AIPO_STORE_PORT when set, or on
// MASTER_PORT+1 under torchrun, whose agent holds MASTER_PORT
// (TORCHELASTIC_USE_AGENT_STORE=True). Errors are
// *EnvError values naming the variable and the fix.
func ParseEnv(getenv func(string) string) (Env, error) {
	e := Env{Source: "torchrun"}
	rankVar, sizeVar, localVar := "RANK", "WORLD_SIZE", "LOCAL_RANK"
	if getenv("RANK") == "" && getenv("WORLD_SIZE") == "" && getenv("SLURM_PROCID") != "" {
		e.Source = "slurm"
		rankVar, sizeVar, localVar = "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
	}
	launch := "start every process with torchrun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (LOCAL_RANK optional)"
	var err error
	if e.WorldSize, err = intVar(getenv, sizeVar, launch); err != nil {
		return Env{}, err
	}
	if e.WorldSize < 1 {
		return Env{}, &EnvError{Var: sizeVar, Value: getenv(sizeVar), Problem: "a group needs at least one rank", Fix: "set it to the number of processes (1 or more)"}
	}
	if e.Rank, err = intVar(getenv, rankVar, launch); err != nil {
		return Env{}, err
	}
	if e.Rank < 0 || e.Rank >= e.WorldSize {
		return Env{}, &EnvError{Var: rankVar, Value: getenv(rankVar),
			Problem: "it must be in [0, " + sizeVar + ") = [0, " + strconv.Itoa(e.WorldSize) + ")",
			Fix:     "give each process a distinct rank below " + sizeVar}
	}
	if getenv(localVar) != "" {
		if e.LocalRank, err = intVar(getenv, localVar, launch); err != nil {
			return Env{}, err
		}
		if e.LocalRank < 0 {
			return Env{}, &EnvError{Var: localVar, Value: getenv(localVar), Problem: "it is negative", Fix: "set it to the process's index on its machine (0, 1, ...)"}
		}
	}
	e.MasterAddr = strings.TrimSpace(getenv("MASTER_ADDR"))
	if e.MasterAddr == "" {
		return Env{}, &EnvError{Var: "MASTER_ADDR", Problem: "the ranks need the address of rank 0's machine to meet",
			Fix: "set it to rank 0's host name or IP address on every rank (127.0.0.1 on one machine)"}
	}
	if e.MasterPort, err = intVar(getenv, "MASTER_PORT", "set it to a free TCP port on rank 0's machine, the same on every rank"); err != nil {
		return Env{}, err
	}
	if e.MasterPort < 1 || e.MasterPort > 65535 {
		return Env{}, &EnvError{Var: "MASTER_PORT", Value: getenv("MASTER_PORT"), Problem: "it is not a TCP port (1-65535)", Fix: "set it to a free TCP port on rank 0's machine, the same on every rank"}
	}
	// torchrun's agent serves its own store on MASTER_PORT and says so
	// with TORCHELASTIC_USE_AGENT_STORE: rank 0's store then takes the
	// next port, unless AIPO_STORE_PORT names one.
	switch {
	case strings.TrimSpace(getenv("AIPO_STORE_PORT")) != "":
		if e.MasterPort, err = intVar(getenv, "AIPO_STORE_PORT", "set it to a free TCP port on rank 0's machine, the same on every rank"); err != nil {
			return Env{}, err
		}
		if e.MasterPort < 1 || e.MasterPort > 65535 {
			return Env{}, &EnvError{Var: "AIPO_STORE_PORT", Value: getenv("AIPO_STORE_PORT"), Problem: "it is not a TCP port (1-65535)", Fix: "set it to a free TCP port on rank 0's machine, the same on every rank"}
		}
	case strings.EqualFold(strings.TrimSpace(getenv("TORCHELASTIC_USE_AGENT_STORE")), "true"):
		if e.MasterPort == 65535 {
			return Env{}, &EnvError{Var: "MASTER_PORT", Value: getenv("MASTER_PORT"), Problem: "torchrun's agent holds it, and the store of aipo's ranks takes the next port, which does not exist", Fix: "give torchrun a lower --master-port, or set AIPO_STORE_PORT"}
		}
		e.MasterPort++
	}
	return e, nil
}

func intVar(getenv func(string) string, name, fix string) (int, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return 0, &EnvError{Var: name, Problem: "it is required", Fix: fix}
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, &EnvError{Var: name, Value: v, Problem: "it is not an integer", Fix: fix}
	}
	return n, nil
}
