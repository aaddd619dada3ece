# Build with the locked dependency set, run as a non-root user on an unprivileged port.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
# A workspace member: cargo reads its manifest even when building the binary.
COPY tests/fake-apiserver ./tests/fake-apiserver
RUN cargo build --release --locked

FROM debian:bookworm-slim
COPY --from=build /src/target/release/clusterset-dns /usr/local/bin/clusterset-dns
COPY config/demo /etc/clusterset-dns/demo
USER 65532:65532
EXPOSE 5300/udp 5300/tcp 9153/tcp
ENTRYPOINT ["/usr/local/bin/clusterset-dns"]
CMD ["serve", "--manifests", "/etc/clusterset-dns/demo", "--listen", "0.0.0.0:5300", "--state-file", "/tmp/vips.json"]
