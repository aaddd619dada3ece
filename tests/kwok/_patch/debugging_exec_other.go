//go:build !windows

/*
Copyright 2023 The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// kwok v0.8.0's pkg/kwok/server/debugging_exec_other.go with one fix, put
// over the module's file at build time (tests/control-plane/build.sh): an exec with a TTY but no stdin (`kubectl
// exec -t` without `-i`; the MCS conformance suite's request Pod) passed a
// nil reader to the tunnel, whose copy then panicked and killed kwok, and
// output still in the pty when the command exited was lost. Without stdin
// the output is copied alone and drained before the exec returns.

package server

import (
	"context"
	"io"

	cpty "github.com/creack/pty"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"sigs.k8s.io/kwok/pkg/log"
	utilsexec "sigs.k8s.io/kwok/pkg/utils/exec"
	utilsnet "sigs.k8s.io/kwok/pkg/utils/net"
)

func (s *Server) execInContainerWithTTY(ctx context.Context, cmd []string, in io.Reader, out io.WriteCloser, resize <-chan remotecommand.TerminalSize) error {
	logger := log.FromContext(ctx)

	// Create a pty.
	pty, tty, err := cpty.Open()
	if err != nil {
		return err
	}
	defer func() {
		_ = pty.Close()
		_ = tty.Close()
	}()

	// Create a two way tunnel for pty and stream, or copy the output alone
	// when there is no stdin.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		buf1 := s.bufPool.Get()
		buf2 := s.bufPool.Get()
		defer func() {
			s.bufPool.Put(buf1)
			s.bufPool.Put(buf2)
		}()
		if in == nil {
			// Ends with EIO once every holder of the tty side closed it.
			_, _ = io.CopyBuffer(out, pty, buf1)
			return
		}
		stm := struct {
			io.Reader
			io.Writer
		}{in, out}
		err := utilsnet.Tunnel(ctx, pty, stm, buf1, buf2)
		if err != nil {
			logger.Error("failed to tunnel",
				"err", err,
			)
		}
	}()

	// Resize pty.
	if resize != nil {
		go func() {
			for size := range resize {
				err := cpty.Setsize(pty, &cpty.Winsize{
					Rows: size.Height,
					Cols: size.Width,
				})
				if err != nil {
					logger.Error("failed to resize pty",
						"err", err,
					)
				}
			}
		}()
	}

	// Set the stream as the stdin/stdout/stderr.
	ctx = utilsexec.WithIOStreams(ctx, utilsexec.IOStreams{
		In:     tty,
		Out:    tty,
		ErrOut: tty,
	})

	// Execute the command.
	err = utilsexec.Exec(ctx, cmd[0], cmd[1:]...)
	if in == nil {
		_ = tty.Close()
		select {
		case <-drained:
		case <-ctx.Done():
		}
	}
	if err != nil {
		return err
	}

	return nil
}
