//go:build cgo && !purego

package gloo

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aipo-rl/aipo/learner/collective"
	"github.com/aipo-rl/aipo/learner/internal/disttest"
)

// val is the element i of rank r's input: a small integer, so that every
// sum of a few ranks is exact in float32 and the reference is exact.
func val(r, i int) float32 { return float32((i*7+r*13)%101 - 50) }

// countPatterns are per-rank counts for n ranks: uneven and not divisible
// by n, with zeros, all empty, and large.
func countPatterns(n int) map[string][]int {
	p := map[string][]int{"uneven": {}, "zeros": {}, "empty": {}, "large": {}}
	for j := 0; j < n; j++ {
		p["uneven"] = append(p["uneven"], 2*j+1+(j%2)*3)
		z := 0
		if j%2 == 0 {
			z = 1000 + j
		}
		p["zeros"] = append(p["zeros"], z)
		p["empty"] = append(p["empty"], 0)
		p["large"] = append(p["large"], 50000+17*j)
	}
	return p
}

func offsets(c []int) []int {
	off := make([]int, len(c)+1)
	for i, v := range c {
		off[i+1] = off[i] + v
	}
	return off
}

// programCollectives runs every collective against a reference computed
// here, printing "ok NAME" for each, and exits 0 when all match.
func programCollectives() int {
	g, c, err := join(testOptions())
	if err != nil {
		return failed(err)
	}
	defer g.Close()
	defer c.Close()
	ctx := context.Background()
	r, n := c.Rank(), c.Size()
	check := func(name string, got []float32, want func(i int) float32) error {
		for i := range got {
			if w := want(i); got[i] != w {
				return fmt.Errorf("%s: element %d of %d is %v, want %v", name, i, len(got), got[i], w)
			}
		}
		fmt.Printf("ok %s\n", name)
		return nil
	}
	run := func() error {
		for _, size := range []int{0, 1, 13, 100003} {
			buf := make([]float32, size)
			for i := range buf {
				buf[i] = val(r, i)
			}
			if err := c.AllReduce(ctx, collective.Float32s(buf)); err != nil {
				return err
			}
			if err := check(fmt.Sprintf("allreduce/%d", size), buf, func(i int) float32 {
				var s float32
				for q := 0; q < n; q++ {
					s += val(q, i)
				}
				return s
			}); err != nil {
				return err
			}
		}
		for _, name := range []string{"uneven", "zeros", "empty", "large"} {
			counts := countPatterns(n)[name]
			off := offsets(counts)
			send := make([]float32, off[n])
			for i := range send {
				send[i] = val(r, i)
			}
			recv := make([]float32, counts[r])
			if err := c.ReduceScatter(ctx, collective.Float32s(send), collective.Float32s(recv), counts); err != nil {
				return err
			}
			if err := check("reducescatter/"+name, recv, func(k int) float32 {
				var s float32
				for q := 0; q < n; q++ {
					s += val(q, off[r]+k)
				}
				return s
			}); err != nil {
				return err
			}
			mine := make([]float32, counts[r])
			for k := range mine {
				mine[k] = val(r, k)
			}
			all := make([]float32, off[n])
			if err := c.AllGather(ctx, collective.Float32s(mine), collective.Float32s(all), counts); err != nil {
				return err
			}
			if err := check("allgather/"+name, all, func(i int) float32 {
				q := 0
				for off[q+1] <= i {
					q++
				}
				return val(q, i-off[q])
			}); err != nil {
				return err
			}
		}
		for _, name := range []string{"uneven", "empty", "large"} {
			count := func(from, to int) int {
				switch name {
				case "uneven":
					return (3*from + 5*to + 1) % 4 * (from + 1)
				case "large":
					return 20000 + 7*from + 3*to
				}
				return 0
			}
			sc, rc := make([]int, n), make([]int, n)
			for j := 0; j < n; j++ {
				sc[j], rc[j] = count(r, j), count(j, r)
			}
			so, ro := offsets(sc), offsets(rc)
			send, recv := make([]float32, so[n]), make([]float32, ro[n])
			for j := 0; j < n; j++ {
				for k := 0; k < sc[j]; k++ {
					send[so[j]+k] = val(r*n+j, k)
				}
			}
			if err := c.AllToAll(ctx, collective.Float32s(send), sc, collective.Float32s(recv), rc); err != nil {
				return err
			}
			if err := check("alltoall/"+name, recv, func(i int) float32 {
				j := 0
				for ro[j+1] <= i {
					j++
				}
				return val(j*n+r, i-ro[j])
			}); err != nil {
				return err
			}
		}
		for root := 0; root < n; root++ {
			buf := make([]float32, 1001)
			for i := range buf {
				buf[i] = -7
				if r == root {
					buf[i] = val(root, i)
				}
			}
			if err := c.Broadcast(ctx, collective.Float32s(buf), root); err != nil {
				return err
			}
			if err := check(fmt.Sprintf("broadcast/float32/root%d", root), buf, func(i int) float32 { return val(root, i) }); err != nil {
				return err
			}
		}
		msg := []byte(strings.Repeat("x", 77))
		if r == n-1 {
			msg = []byte(fmt.Sprintf("%-77s", "from the last rank"))
		}
		if err := c.Broadcast(ctx, collective.Bytes(msg), n-1); err != nil {
			return err
		}
		if want := fmt.Sprintf("%-77s", "from the last rank"); string(msg) != want {
			return fmt.Errorf("broadcast/bytes: got %q, want %q", msg, want)
		}
		fmt.Println("ok broadcast/bytes")
		if err := c.Broadcast(ctx, collective.Float32s(nil), 0); err != nil {
			return err
		}
		fmt.Println("ok broadcast/empty")
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		fmt.Println("ok barrier")
		if os.Getenv("AIPO_DIST_BIG") == "1" {
			// 64 MiB of float32.
			buf := make([]float32, 16<<20)
			for i := range buf {
				buf[i] = float32(i%1000 + r)
			}
			start := time.Now()
			if err := c.AllReduce(ctx, collective.Float32s(buf)); err != nil {
				return err
			}
			took := time.Since(start)
			if err := check("allreduce/64MiB", buf, func(i int) float32 { return float32(n*(i%1000) + n*(n-1)/2) }); err != nil {
				return err
			}
			fmt.Printf("allreduce 64 MiB took %.2f s\n", took.Seconds())
		}
		return nil
	}
	if err := run(); err != nil {
		return failed(err)
	}
	fmt.Println("ok all")
	return 0
}

func TestCollectives(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			start := time.Now()
			rs := disttest.Launch(t, disttest.Spec{Program: "collectives", Size: n,
				Env: func(int) []string { return []string{"AIPO_DIST_BIG=1"} }})
			for _, e := range rs.Wait(90 * time.Second) {
				if e.Code != 0 || !strings.Contains(e.Output, "ok all") {
					t.Errorf("rank %d exited %d:\n%s", e.Rank, e.Code, e.Output)
				}
				if e.Rank == 0 {
					for _, l := range strings.Split(e.Output, "\n") {
						if strings.HasPrefix(l, "allreduce 64 MiB") {
							t.Logf("rank 0: %s", l)
						}
					}
				}
			}
			t.Logf("%d ranks: %.1f s", n, time.Since(start).Seconds())
		})
	}
}
