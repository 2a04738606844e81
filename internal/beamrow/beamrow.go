// Package beamrow gives the struct types aipo's pipelines pass between
// stages a coder that runners carry as opaque bytes.
//
// By default the Go SDK encodes a struct element with Beam's row coder
// (beam:coder:row:v1), a coder runners written in Java decode themselves
// wherever they group or combine. Beam 2.62's Flink runner, decoding the
// Go SDK 2.77's row encoding of a struct with slice fields (analytics'
// per-step accumulator) in a GroupCombine, read a wrong element count and
// spun a core for ten minutes without failing. Registered here, a type is
// encoded with the same row encoding, but under a custom coder the SDK
// length-prefixes and runners pass through as bytes, so a runner of any
// release moves it unread. Keys stay strings and integers, which every
// runner decodes alike.
package beamrow

import (
	"bytes"
	"fmt"
	"reflect"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/funcx"
	beamcoder "github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/util/reflectx"
)

// Register registers T, a struct type, with the Beam SDK (as
// beam.RegisterType does) and gives it the opaque row coder. Call it from
// an init function, before beam.Init.
//
// The row encoding is deterministic (the SDK sorts map entries by their
// encoded keys), so the coder is registered as one.
func Register[T any]() {
	t := reflect.TypeOf((*T)(nil)).Elem()
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("beamrow.Register[%v]: not a struct type", t))
	}
	enc, err := beamcoder.RowEncoderForStruct(t)
	if err != nil {
		panic(fmt.Sprintf("beamrow.Register[%v]: %v", t, err))
	}
	dec, err := beamcoder.RowDecoderForStruct(t)
	if err != nil {
		panic(fmt.Sprintf("beamrow.Register[%v]: %v", t, err))
	}
	encode := func(v T) ([]byte, error) {
		var b bytes.Buffer
		if err := enc(v, &b); err != nil {
			return nil, fmt.Errorf("encoding %v: %w", t, err)
		}
		return b.Bytes(), nil
	}
	decode := func(b []byte) (T, error) {
		v, err := dec(bytes.NewReader(b))
		if err != nil {
			var zero T
			return zero, fmt.Errorf("decoding %v: %w", t, err)
		}
		return v.(T), nil
	}
	// The SDK sends a custom coder to its workers by function name, and
	// every instantiation of a closure in a generic function has the same
	// compiler name: each pair is registered under a name of its own, the
	// way the SDK's own batch transform registers its generic coders.
	encName := fmt.Sprintf("beamrow.encode[%v]", t)
	decName := fmt.Sprintf("beamrow.decode[%v]", t)
	runtime.RegisterType(t)
	runtime.RegisterFunctionWithName(encName, encode)
	runtime.RegisterFunctionWithName(decName, decode)
	encFn, err := funcx.New(reflectx.MakeFuncWithName(encName, encode))
	if err != nil {
		panic(fmt.Sprintf("beamrow.Register[%v]: %v", t, err))
	}
	decFn, err := funcx.New(reflectx.MakeFuncWithName(decName, decode))
	if err != nil {
		panic(fmt.Sprintf("beamrow.Register[%v]: %v", t, err))
	}
	beamcoder.RegisterDeterministicCoderWithFuncs(t, encFn, decFn)
}
