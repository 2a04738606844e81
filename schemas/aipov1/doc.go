// Package aipov1 holds the Go code generated from the protobuf definitions
// under schemas/proto/aipo/v1 (package aipo.v1): the gRPC services that aipo
// processes use to talk to each other. Regenerate with scripts/proto.sh;
// do not edit the *.pb.go files by hand.
package aipov1
