package inproc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"runtime/debug"

	"github.com/aipo-rl/aipo/internal/storage"
	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/checkpoint"
	"github.com/aipo-rl/aipo/learner/engine"
	"github.com/aipo-rl/aipo/learner/model"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/learner/trainer"
)

// load starts an engine over the model directory dir (see LoadCheckpoint).
func load(ctx context.Context, dir string, q url.Values) (*engine.Engine, error) {
	cfg, err := engineConfig(q)
	if err != nil {
		return nil, err
	}
	ld, err := LoadCheckpoint(ctx, dir, q.Get("tokenizer"))
	if err != nil {
		return nil, err
	}
	if lora := q.Get("lora"); lora != "" {
		if ld, err = ld.WithAdapter(ctx, lora); err != nil {
			return nil, err
		}
	}
	cfg.Name = filepath.Base(dir)
	e, err := engine.New(ld.Model, ld.Tokenizer, ld.Trainer.PolicyVersion, cfg)
	if err != nil {
		return nil, fmt.Errorf("inproc: checkpoint %s: %w", dir, err)
	}
	return e, nil
}

// Loaded is a model directory read for sampling.
type Loaded struct {
	Model     *model.Model
	Tokenizer tokenizer.Tokenizer
	// Trainer is the checkpoint's trainer_state.json; its PolicyVersion
	// names the weights (0 for a plain Hugging Face directory).
	Trainer checkpoint.TrainerState
	// DType is the element type the directory's weights are stored in
	// (BF16 for the Hugging Face releases of Qwen and Llama).
	DType checkpoint.DType
}

// LoadCheckpoint reads the model directory dir (local or gs://), one of
// our committed checkpoints or a plain Hugging Face directory as vLLM and
// SGLang take it (see checkpoint.LoadServed: the weights of
// model.safetensors or its shards, in the model's dtype, not a
// checkpoint's float32 masters), and builds its model and tokenizer: the
// one named by tokenizerPath ("builtin" or a tokenizer.json path) when not
// empty, else the directory's own tokenizer.json. It is what inproc:///dir
// URIs and `aipo serve` load.
func LoadCheckpoint(ctx context.Context, dir, tokenizerPath string) (Loaded, error) {
	ck, err := checkpoint.LoadServed(ctx, dir)
	if err != nil {
		return Loaded{}, fmt.Errorf("inproc: %w", err)
	}
	m, err := modelOf(ck)
	if err != nil {
		return Loaded{}, fmt.Errorf("inproc: %s does not fit %s: %w", checkpoint.WeightsPath(ctx, dir), storage.Join(dir, checkpoint.ConfigName), err)
	}
	tok, err := tokenizerOf(ck, tokenizerPath)
	if err != nil {
		return Loaded{}, fmt.Errorf("inproc: checkpoint %s: %w", dir, err)
	}
	dt := ck.DType
	if dt == "" {
		dt = checkpoint.ModelDType(ck.Config)
	}
	return Loaded{Model: m, Tokenizer: tok, Trainer: ck.Trainer, DType: dt}, nil
}

// modelOf builds the model of a loaded checkpoint.
func modelOf(ck checkpoint.Checkpoint) (*model.Model, error) {
	return trainer.ModelFromTensors(ck.Config, ck.Tensors)
}

// tokenizerOf returns the tokenizer named by the URI's tokenizer parameter
// ("builtin" or a path), else the checkpoint's own tokenizer.json.
func tokenizerOf(ck checkpoint.Checkpoint, override string) (tokenizer.Tokenizer, error) {
	if override != "" {
		return tokenizer.Load(override)
	}
	tj, ok := ck.Tokenizer["tokenizer.json"]
	if !ok {
		return nil, fmt.Errorf("no tokenizer.json among its files; copy the model's tokenizer.json (and tokenizer_config.json) into the directory, or add ?tokenizer=builtin (or =/path/to/tokenizer.json) to the URI (--tokenizer for aipo serve)")
	}
	return tokenizer.Parse(tj, ck.Tokenizer["tokenizer_config.json"])
}

// The precisions of the CPU decoder's products, as vLLM's --dtype spells
// them: aipo serve's --dtype and policy.dtype.
const (
	DTypeAuto = "auto"
	DTypeBF16 = "bfloat16"
	DTypeF32  = "float32"
)

// AutoBF16MinWidth is the narrowest model (hidden_size) that "auto"
// decodes in bfloat16. A bfloat16 product pays a fixed cost a call (about
// 10 µs on 2 cores of an AMX Xeon: oneDNN's call, the rows padded to a
// block of 32) that the float32 kernels do not; below this width that
// cost outweighs what the halved weight bytes and the AMX tiles save (on
// those CPUs a tiny Qwen3 of width 64 serves at about two thirds of its
// float32 speed in bfloat16, while from width 1024 bfloat16 is the faster).
const AutoBF16MinWidth = 512

// ResolveDType is the precision the CPU decoder runs a model of hidden
// size width stored in stored at, for the requested dtype: bfloat16
// (model.DecodeBF16: the products on AMX or AVX512-BF16 through oneDNN,
// or on AVX2 and FMA by aipo's own kernels)
// when asked, or for "auto" (or "") when the weights are stored in
// bfloat16, the model is at least AutoBF16MinWidth wide and this CPU
// multiplies bfloat16 (model.BF16DecodeAvailable); float32 otherwise, the exact reference. A
// request for bfloat16 where it cannot run is an error naming the reason.
func ResolveDType(requested string, stored checkpoint.DType, width int) (string, error) {
	ok, why := model.BF16DecodeAvailable()
	switch requested {
	case "", DTypeAuto:
		if ok && stored == checkpoint.BF16 && width >= AutoBF16MinWidth {
			return DTypeBF16, nil
		}
		return DTypeF32, nil
	case DTypeF32:
		return DTypeF32, nil
	case DTypeBF16:
		if !ok {
			return "", fmt.Errorf("dtype bfloat16 needs bfloat16 products (oneDNN's AMX or AVX512-BF16 kernels, or aipo's own on AVX2 and FMA), and this process has none: %s; use float32", why)
		}
		return DTypeBF16, nil
	}
	return "", fmt.Errorf("dtype %q: use auto, bfloat16 or float32", requested)
}

// OpenDecoder returns the engine backend that decodes l's model on dv in
// the precision requested resolves to there, and that precision. With dv
// nil or the cpu device it is the host model itself, its precision set by
// DecodeIn. A device whose decoders can hold bfloat16
// (backend.BF16Decoders: cuda) gets a copy in bfloat16 when asked, or for
// "auto" when the checkpoint stores bfloat16 (as vLLM's --dtype auto
// takes the model's dtype; no CPU instructions are needed, and no minimum
// width: a GPU's tensor cores are not called per product as oneDNN is),
// else in float32. Any other device decodes in its own precision (""),
// and refuses a request for bfloat16.
func (l Loaded) OpenDecoder(dv backend.Device, requested string) (engine.Backend, string, error) {
	// Loading left garbage as large as the model or larger (the decoded
	// tensors, in bfloat16 the float32 weights DecodeBF16Only dropped, on a
	// device the host copy): give it back to the OS now rather than when
	// the runtime's scavenger gets to it, so that a server's resident
	// memory is its model's from the first request on.
	defer debug.FreeOSMemory()
	m := l.Model
	if dv == nil {
		dec := engine.CPU(m)
		dt, err := l.DecodeIn(dec, requested)
		return dec, dt, err
	}
	if bd, ok := dv.(backend.BF16Decoders); ok {
		dt, err := resolveDeviceDType(requested, l.DType)
		if err != nil {
			return nil, "", err
		}
		var dec backend.Decoder
		if dt == DTypeBF16 {
			dec, err = bd.DecoderBF16(m)
		} else {
			dec, err = dv.Decoder(m)
		}
		return dec, dt, err
	}
	dec, err := dv.Decoder(m)
	if err != nil {
		return nil, "", err
	}
	dt, err := l.DecodeIn(dec, requested)
	if err == nil && dt == "" && requested == DTypeBF16 {
		err = errors.New("dtype bfloat16: this device decodes in its own precision; use auto or float32")
	}
	if err != nil {
		dec.Close()
		return nil, "", err
	}
	return dec, dt, nil
}

// EngineDType is the precision an engine of a model of hidden size width
// stored in stored decodes in for the requested dtype, on the CPU
// (ResolveDType) or on a device that holds bfloat16 (OpenDecoder's
// rule), without loading anything: float32 where the request cannot run,
// which loading the engine would refuse. aipo plan sizes the engine with
// it.
func EngineDType(requested string, stored checkpoint.DType, width int, cpu bool) string {
	dt, err := resolveDeviceDType(requested, stored)
	if cpu {
		dt, err = ResolveDType(requested, stored, width)
	}
	if err != nil {
		return DTypeF32
	}
	return dt
}

// resolveDeviceDType is ResolveDType for a device whose decoders hold
// bfloat16 without the CPU's instructions (see OpenDecoder).
func resolveDeviceDType(requested string, stored checkpoint.DType) (string, error) {
	switch requested {
	case "", DTypeAuto:
		if stored == checkpoint.BF16 {
			return DTypeBF16, nil
		}
		return DTypeF32, nil
	case DTypeF32, DTypeBF16:
		return requested, nil
	}
	return "", fmt.Errorf("dtype %q: use auto, bfloat16 or float32", requested)
}

// DecodeIn makes dec, a decoder of l's model, decode in the precision
// that ResolveDType gives for requested, and returns it. In bfloat16 the
// model keeps its bfloat16 decoding weights alone (model.DecodeBF16Only):
// l is then for sampling only. A decoder on another device, which
// decodes a copy of the model in its own precision, is left as it is,
// and the precision returned is "".
func (l Loaded) DecodeIn(dec engine.Backend, requested string) (string, error) {
	if h, ok := dec.(interface{ HostModel() *model.Model }); !ok || h.HostModel() != l.Model {
		return "", nil
	}
	dt, err := ResolveDType(requested, l.DType, l.Model.Config().HiddenSize)
	if err != nil {
		return "", err
	}
	if dt == DTypeBF16 {
		err = l.Model.DecodeBF16Only()
	} else {
		err = l.Model.DecodeBF16(false)
	}
	if err != nil {
		return "", err
	}
	return dt, nil
}
