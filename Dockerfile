# clusterset-dns in an image of its own: one static binary, the demo
# manifests, nothing else (no shell, no package manager, no libc).
# docs/container.md says how to build and run it.
#
# Two ways to build the same image from this one file:
#
# - `docker build -t clusterset-dns:0.1.0 .` (or `podman build`): the `build`
#   stage compiles a static musl binary with the pinned toolchain.
# - Without access to a registry (the project's CI): compile the same binary
#   on the host (tests/image/build.sh does) and give buildah a directory in
#   place of the `build` stage:
#       buildah bud --build-context build=DIR ...
#   where DIR holds rootfs/clusterset-dns and an empty
#   rootfs/var/lib/clusterset-dns. A named build context takes precedence
#   over a stage of the same name, the stage is then unused and skipped, so
#   no base image is pulled (the final stage starts FROM scratch).

FROM docker.io/library/rust:1.95-bookworm AS build
# musl: a fully static binary (ring and mimalloc compile C: musl-gcc).
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add "$(uname -m)-unknown-linux-musl"
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
# A workspace member: cargo reads its manifest even when building the binary.
COPY tests/fake-apiserver ./tests/fake-apiserver
RUN target="$(uname -m)-unknown-linux-musl" \
    && cargo build --release --locked --target "$target" \
    && mkdir -p /rootfs/var/lib/clusterset-dns \
    && strip -o /rootfs/clusterset-dns "target/$target/release/clusterset-dns"

FROM scratch
COPY --from=build /rootfs/clusterset-dns /usr/local/bin/clusterset-dns
# The VIP state (and SOA serial) of the embedded demo: the only place the
# server writes, so the root filesystem can be read-only with a volume or
# tmpfs here (docs/container.md).
COPY --from=build --chown=65532:65532 /rootfs/var/lib/clusterset-dns /var/lib/clusterset-dns
COPY config/demo /etc/clusterset-dns/demo
USER 65532:65532
EXPOSE 5300/udp 5300/tcp 9153/tcp
ENTRYPOINT ["/usr/local/bin/clusterset-dns"]
# The embedded demo; in Kubernetes the Deployment's args replace this
# (config/kubernetes/deployment.yaml).
CMD ["serve", "--manifests", "/etc/clusterset-dns/demo", "--listen", "0.0.0.0:5300", "--metrics-listen", "0.0.0.0:9153", "--state-file", "/var/lib/clusterset-dns/vips.json"]
