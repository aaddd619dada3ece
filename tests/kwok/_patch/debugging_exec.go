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

// kwok v0.8.0's pkg/kwok/server/debugging_exec.go with one addition, put over
// the module's file at build time (tests/control-plane/build.sh): when the
// file named by $KWOK_EXEC_NETNS exists (a network namespace, bind-mounted
// or linked there by the test), exec'd commands run in that namespace, as a
// kubelet's exec runs in the Pod's network: the tests' "node" namespace,
// where the cluster's kube-proxy programs Service IPs. Without it, they run
// in kwok's own namespace, as before.

package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/emicklei/go-restful/v3"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	"sigs.k8s.io/kwok/pkg/log"
	utilsexec "sigs.k8s.io/kwok/pkg/utils/exec"
	utilsslices "sigs.k8s.io/kwok/pkg/utils/slices"
)

// ExecInContainer executes a command in a container.
func (s *Server) ExecInContainer(ctx context.Context, name string, uid string, container string, cmd []string, in io.Reader, stdout, stderr io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	pod := strings.Split(name, "/")
	if len(pod) != 2 {
		return fmt.Errorf("invalid pod name %q", name)
	}
	podName, podNamespace := pod[0], pod[1]
	execTarget, err := getExecTarget(s.execs.Get(), s.clusterExecs.Get(), podName, podNamespace, container)
	if err != nil {
		return err
	}

	// Currently only support local exec.
	if execTarget.Local == nil {
		return fmt.Errorf("not set local exec")
	}

	// Set the environment variables.
	if len(execTarget.Local.Envs) != 0 {
		envs := utilsslices.Map(execTarget.Local.Envs, func(env internalversion.EnvVar) string {
			return fmt.Sprintf("%s=%s", env.Name, env.Value)
		})
		ctx = utilsexec.WithEnv(ctx, envs)
	}

	// Set the user.
	if execTarget.Local.SecurityContext != nil {
		ctx = utilsexec.WithUser(ctx, execTarget.Local.SecurityContext.RunAsUser, execTarget.Local.SecurityContext.RunAsGroup)
	}

	// Set the working directory.
	if execTarget.Local.WorkDir != "" {
		ctx = utilsexec.WithDir(ctx, execTarget.Local.WorkDir)
	}

	// Enter the node's network namespace (util-linux nsenter: the
	// namespace only, the mount namespace with its resolv.conf stays).
	if netns := os.Getenv("KWOK_EXEC_NETNS"); netns != "" {
		if _, err := os.Stat(netns); err == nil {
			cmd = append([]string{"nsenter", "--net=" + netns, "--"}, cmd...)
		}
	}

	// Set cancel context.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if tty {
		return s.execInContainerWithTTY(ctx, cmd, in, stdout, resize)
	}

	return s.execInContainer(ctx, cmd, in, stdout, stderr)
}

func (s *Server) execInContainer(ctx context.Context, cmd []string, in io.Reader, out, errOut io.WriteCloser) error {
	// Set the pipe stdin.
	if in != nil {
		ctx = utilsexec.WithPipeStdin(ctx, true)
	}

	// Set the stream as the stdin/stdout/stderr.
	ctx = utilsexec.WithIOStreams(ctx, utilsexec.IOStreams{
		In:     in,
		Out:    out,
		ErrOut: errOut,
	})

	// Execute the command.
	err := utilsexec.Exec(ctx, cmd[0], cmd[1:]...)
	if err != nil {
		return err
	}
	return nil
}

func getExecTarget(rules []*internalversion.Exec, clusterRules []*internalversion.ClusterExec, podName, podNamespace string, containerName string) (*internalversion.ExecTarget, error) {
	e, has := utilsslices.Find(rules, func(pf *internalversion.Exec) bool {
		return pf.Name == podName && pf.Namespace == podNamespace
	})
	if has {
		exec, found := findContainerInExecs(containerName, e.Spec.Execs)
		if found {
			return exec, nil
		}
		return nil, fmt.Errorf("exec target not found for container %q in pod %q", containerName, log.KRef(podNamespace, podName))
	}

	for _, ce := range clusterRules {
		if !ce.Spec.Selector.Match(podName, podNamespace) {
			continue
		}

		exec, found := findContainerInExecs(containerName, ce.Spec.Execs)
		if found {
			return exec, nil
		}
	}
	return nil, fmt.Errorf("no exec found for container %q in pod %q", containerName, log.KRef(podNamespace, podName))
}

func findContainerInExecs(containerName string, execs []internalversion.ExecTarget) (*internalversion.ExecTarget, bool) {
	var defaultExecTarget *internalversion.ExecTarget
	for i, ex := range execs {
		if len(ex.Containers) == 0 && defaultExecTarget == nil {
			defaultExecTarget = &execs[i]
			continue
		}
		if slices.Contains(ex.Containers, containerName) {
			return &ex, true
		}
	}
	return defaultExecTarget, defaultExecTarget != nil
}

func (s *Server) getExec(req *restful.Request, resp *restful.Response) {
	params := getExecRequestParams(req)

	streamOpts, err := remotecommand.NewOptions(req.Request)
	if err != nil {
		http.Error(resp, err.Error(), http.StatusBadRequest)
		return
	}

	remotecommand.ServeExec(
		resp.ResponseWriter,
		req.Request,
		s,
		params.podName+"/"+params.podNamespace,
		params.podUID,
		params.containerName,
		params.cmd,
		streamOpts,
		s.idleTimeout,
		s.streamCreationTimeout,
		remotecommand.SupportedStreamingProtocols,
	)
}
