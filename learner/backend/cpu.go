package backend

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/model"
)

// The CPU backend is learner/model itself: it is always available, and its
// passes are the host model's own.
func init() { Register(CPUName, cpuBackend{}) }

type cpuBackend struct{}

func (cpuBackend) Available() error      { return nil }
func (cpuBackend) Precisions() []string  { return []string{FP32} }
func (cpuBackend) Open() (Device, error) { return cpuDevice{}, nil }

type cpuDevice struct{}

func (cpuDevice) Close() error { return nil }

func (cpuDevice) Train(m *model.Model, precision string) (Compute, error) {
	if precision != "" && precision != FP32 {
		return nil, fmt.Errorf("backend cpu: precision %s is unknown here: the CPU multiplies in %s", precision, FP32)
	}
	return CPUCompute(m), nil
}

func (cpuDevice) Decoder(m *model.Model) (Decoder, error) {
	if m == nil {
		return nil, fmt.Errorf("backend cpu: Decoder without a model")
	}
	return CPUDecoder(m), nil
}

// CPUCompute is the Compute of the host model itself.
func CPUCompute(m *model.Model) Compute { return cpuCompute{m} }

type cpuCompute struct{ m *model.Model }

func (c cpuCompute) Run(b model.Batch, loss LossGrad) ([]float32, error) {
	a, err := c.m.Forward(b)
	if err != nil {
		return nil, err
	}
	if loss == nil {
		a.Release()
		return a.LogProbs, nil
	}
	grad, err := loss(a.LogProbs, a.Entropy)
	if err != nil {
		a.Release()
		return nil, err
	}
	return a.LogProbs, c.m.Backward(a, grad)
}

func (c cpuCompute) ZeroGrads() error  { c.m.ZeroGrads(); return nil }
func (c cpuCompute) PullGrads() error  { return nil }
func (c cpuCompute) PushParams() error { return nil }
func (c cpuCompute) Close() error      { return nil }

// CPUDecoder is the Decoder of m itself.
func CPUDecoder(m *model.Model) Decoder { return cpuDecoder{m} }

type cpuDecoder struct{ m *model.Model }

func (d cpuDecoder) Config() model.Config { return d.m.Config() }
func (d cpuDecoder) BytesPerToken() int   { return d.m.BytesPerToken() }
func (d cpuDecoder) NewCache() Cache      { return d.m.NewKVCache() }
func (d cpuDecoder) Close() error         { return nil }

func (d cpuDecoder) Extend(caches []Cache, tokens [][]int32, dst []float32) ([]float32, error) {
	kc := make([]*model.KVCache, len(caches))
	for i, c := range caches {
		k, ok := c.(*model.KVCache)
		if !ok {
			return nil, fmt.Errorf("backend cpu: cache %d (%T) was not made by this decoder", i, c)
		}
		kc[i] = k
	}
	return d.m.Extend(kc, tokens, dst)
}
