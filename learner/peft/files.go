package peft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/aipo-rl/aipo/learner/checkpoint"

	"github.com/aipo-rl/aipo/internal/peftdir"
)

// The files of an adapter directory, as PEFT names them.
const (
	ConfigFile  = checkpoint.AdapterConfigName
	WeightsFile = checkpoint.AdapterWeightsName
)

// IsAdapterDir reports whether dir holds a PEFT adapter (its config file).
func IsAdapterDir(dir string) bool { return peftdir.IsAdapterDir(dir) }

// Read loads the adapter in dir. Every error names the file and what is
// wrong with it; a directory that is a whole model, not an adapter, is
// told apart.
func Read(ctx context.Context, dir string) (*Adapter, error) {
	cb, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(dir, "config.json")); serr == nil {
			return nil, fmt.Errorf("lora: %s is a whole model (config.json), not a LoRA adapter (%s): pass it as the base, and the adapter directory as the adapter", dir, ConfigFile)
		}
		return nil, fmt.Errorf("lora: %s has no %s: not a PEFT adapter directory", dir, ConfigFile)
	}
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	var c Config
	if err := json.Unmarshal(cb, &c); err != nil {
		return nil, fmt.Errorf("lora: %s: %w", filepath.Join(dir, ConfigFile), err)
	}
	if err := c.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ConfigFile), err)
	}
	wpath := filepath.Join(dir, WeightsFile)
	tensors, _, err := checkpoint.LoadSafetensors(ctx, wpath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, berr := os.Stat(filepath.Join(dir, "adapter_model.bin")); berr == nil {
				return nil, fmt.Errorf("lora: %s holds adapter_model.bin (a pickle): save the adapter with safe_serialization=True (PEFT's default) and try again", dir)
			}
		}
		return nil, fmt.Errorf("lora: %w", err)
	}
	a, err := fromTensors(c, tensors)
	if err != nil {
		return nil, fmt.Errorf("lora: %s: %w", wpath, err)
	}
	return a, nil
}

func fromTensors(c Config, tensors []checkpoint.Tensor) (*Adapter, error) {
	type key struct {
		layer  int
		target string
	}
	mods := map[key]*Module{}
	for _, t := range tensors {
		layer, target, ab, err := parseKey(t.Name)
		if err != nil {
			return nil, err
		}
		if !c.Targeted(target) {
			return nil, fmt.Errorf("tensor %q adapts %s, which target_modules %v does not name", t.Name, target, c.TargetModules)
		}
		if len(t.Shape) != 2 {
			return nil, fmt.Errorf("tensor %q has shape %v: want a matrix", t.Name, t.Shape)
		}
		k := key{layer, target}
		m := mods[k]
		if m == nil {
			m = &Module{Layer: layer, Target: target}
			mods[k] = m
		}
		switch ab {
		case "A":
			if t.Shape[0] != c.R {
				return nil, fmt.Errorf("tensor %q has shape %v: lora_A is [r, in] and r is %d", t.Name, t.Shape, c.R)
			}
			m.In, m.A = t.Shape[1], t.Data
		case "B":
			if t.Shape[1] != c.R {
				return nil, fmt.Errorf("tensor %q has shape %v: lora_B is [out, r] and r is %d", t.Name, t.Shape, c.R)
			}
			m.Out, m.B = t.Shape[0], t.Data
		}
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("no LoRA matrices")
	}
	a := &Adapter{Config: c}
	for k, m := range mods {
		if m.A == nil || m.B == nil {
			return nil, fmt.Errorf("%s has lora_A or lora_B but not both", Key(k.layer, k.target, "A"))
		}
		a.Modules = append(a.Modules, *m)
	}
	order := map[string]int{}
	for i, t := range Targets {
		order[t] = i
	}
	sort.Slice(a.Modules, func(i, j int) bool {
		x, y := a.Modules[i], a.Modules[j]
		if x.Layer != y.Layer {
			return x.Layer < y.Layer
		}
		return order[x.Target] < order[y.Target]
	})
	return a, nil
}

// Tensors are the adapter's matrices under PEFT's keys.
func (a *Adapter) Tensors() []checkpoint.Tensor {
	out := make([]checkpoint.Tensor, 0, 2*len(a.Modules))
	r := a.Config.R
	for _, m := range a.Modules {
		out = append(out,
			checkpoint.Tensor{Name: Key(m.Layer, m.Target, "A"), Shape: []int{r, m.In}, Data: m.A},
			checkpoint.Tensor{Name: Key(m.Layer, m.Target, "B"), Shape: []int{m.Out, r}, Data: m.B})
	}
	return out
}

// Write saves the adapter into dir (created if missing) as PEFT's
// save_pretrained does, its matrices in dtype (F32, BF16 or F16). The
// config is written last, so that a directory with a config holds a whole
// adapter.
func Write(ctx context.Context, dir string, a *Adapter, dtype checkpoint.DType) error {
	if err := a.Config.Check(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	if err := checkpoint.SaveSafetensors(ctx, filepath.Join(dir, WeightsFile), a.Tensors(), checkpoint.SaveOptions{DType: dtype}); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	b, err := a.Config.ConfigJSON()
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ConfigFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ConfigFile)); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	return nil
}

// Merge returns base's tensors (Hugging Face names) with every module of
// the adapter folded into the weight it adapts; tensors the adapter does
// not touch are returned as they are (shared, not copied). A module whose
// weight is missing from base, or of another shape, is an error naming it.
func (a *Adapter) Merge(base []checkpoint.Tensor) ([]checkpoint.Tensor, error) {
	idx := map[string]int{}
	for i, t := range base {
		idx[t.Name] = i
	}
	out := append([]checkpoint.Tensor(nil), base...)
	scale := a.Config.Scale()
	for _, m := range a.Modules {
		i, ok := idx[m.Base()]
		if !ok {
			return nil, fmt.Errorf("lora: the base has no %s, which the adapter adapts: it was trained on another base", m.Base())
		}
		w := base[i]
		if len(w.Shape) != 2 || w.Shape[0] != m.Out || w.Shape[1] != m.In {
			return nil, fmt.Errorf("lora: the base's %s has shape %v but the adapter's matrices make it [%d %d]: it was trained on another base", m.Base(), w.Shape, m.Out, m.In)
		}
		out[i] = checkpoint.Tensor{Name: w.Name, Shape: w.Shape, Data: m.Merged(w.Data, scale, a.Config.R)}
	}
	return out, nil
}
