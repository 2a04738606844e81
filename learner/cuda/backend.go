package cuda

import (
	"fmt"

	"github.com/aipo-rl/aipo/learner/backend"
	"github.com/aipo-rl/aipo/learner/model"
)

// Name is the name this package registers its backend under
// (learner.backend: cuda, aipo serve --device cuda).
const Name = "cuda"

// The cuda backend opens GPU 0; a binary links it in by importing this
// package (cmd/aipo does, with a blank import).
func init() { backend.Register(Name, cudaBackend{}) }

type cudaBackend struct{}

// Available loads the driver and asks it for a device: without one the
// error names every library path tried and the variable to set.
func (cudaBackend) Available() error {
	info, err := Driver()
	if err != nil {
		return err
	}
	if info.Devices == 0 {
		return fmt.Errorf("cuda: the driver %s sees no GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)", info.Path)
	}
	return nil
}

func (cudaBackend) Precisions() []string { return []string{backend.FP32, backend.BF16} }

func (cudaBackend) Open() (backend.Device, error) {
	dv, err := Open(0)
	if err != nil {
		return nil, err
	}
	return cudaDevice{dv}, nil
}

type cudaDevice struct{ dv *Device }

func (d cudaDevice) Close() error { return d.dv.Close() }

// Train uploads a float32 copy of m with its gradients; with
// backend.BF16 the GEMMs take bfloat16 operands (Model.UseBF16).
func (d cudaDevice) Train(m *model.Model, precision string) (backend.Compute, error) {
	if precision != "" && precision != backend.FP32 && precision != backend.BF16 {
		return nil, fmt.Errorf("cuda: precision %q is unknown: use %s or %s", precision, backend.FP32, backend.BF16)
	}
	g, err := d.dv.NewModel(m)
	if err != nil {
		return nil, err
	}
	if precision == backend.BF16 {
		if err := g.UseBF16(); err != nil {
			g.Free()
			return nil, err
		}
	}
	return &compute{host: m, dev: g}, nil
}

func (d cudaDevice) Decoder(m *model.Model) (backend.Decoder, error) {
	return d.dv.NewDecoder(m)
}

// compute runs the trainer's passes on the device copy of host.
type compute struct {
	host *model.Model
	dev  *Model
}

func (c *compute) Run(b model.Batch, loss backend.LossGrad) ([]float32, error) {
	lp, _, err := c.dev.ForwardBackward(b, loss)
	return lp, err
}

func (c *compute) ZeroGrads() error  { return c.dev.ZeroGrads() }
func (c *compute) PullGrads() error  { return c.dev.Grads(c.host.GradData()) }
func (c *compute) PushParams() error { return c.dev.SetParams(c.host.ParamData()) }
func (c *compute) Close() error      { return c.dev.Free() }
