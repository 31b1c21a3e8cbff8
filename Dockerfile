# syntax=docker/dockerfile:1
#
# pathprobe container image.
#
#   docker build -t pathprobe .
#   docker run --rm -p 9813:9813 -p 5301:5301/tcp -p 5301:5301/udp pathprobe
#
# The image runs `pathprobe serve` with the default configuration baked in at
# /etc/pathprobe/pathprobe.yml (a copy of config/pathprobe.yml: the responder
# plus loopback probes). Mount your own file over it to probe other hosts:
#
#   docker run -v "$PWD/my.yml:/etc/pathprobe/pathprobe.yml:ro" ... pathprobe
#
# pathprobe needs no capabilities: its ports are above 1024, and socket
# buffers above net.core.[rw]mem_max are only attempted (SO_*BUFFORCE) and
# fall back to the sysctl limits, so `--cap-drop ALL` is fine.

# The build image's Rust must be at least the highest rust-version among the
# crate and the dependencies Cargo.lock pins for the build (1.89 today, set
# by uuid through hickory-resolver; tests/integration/deploy/ checks it); 1.95 is the
# toolchain the tests run with. The Debian release must be the runtime
# image's, so that the binary finds the glibc it was linked against.
ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=trixie

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /build

# Dependencies first, in a layer of their own: it is rebuilt only when
# Cargo.toml or Cargo.lock change, not on every source edit. The crate's
# targets are stand-ins here (an empty library, an empty main, and the
# benches that Cargo.toml names, which cargo insists exist).
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && echo 'fn main() {}' > benches/serve_scale.rs \
 && echo 'fn main() {}' > benches/zerocopy_send.rs \
 && cargo build --release --locked \
 && rm -rf src benches

# The commit the image is built from, for `pathprobe --version` and the
# startup log: the build context has no .git for build.rs to ask, so pass it
#   docker build --build-arg PATHPROBE_COMMIT="$(git rev-parse --short=12 HEAD)" .
# Not given, the binary says "unknown". An ARG is in the environment of the
# RUN lines after it, where build.rs reads it; it has no default, so that
# without it the variable is unset and build.rs, not an empty value, decides.
# Declared after the dependency layer, so that a new commit does not rebuild
# the dependencies.
ARG PATHPROBE_COMMIT

# The real sources. build.rs sets PATHPROBE_COMMIT for the compiler, which
# src/build_info.rs reads; config/ is needed at compile time: the default
# configuration is embedded in the binary with include_str!.
COPY build.rs ./
COPY src ./src
COPY benches ./benches
COPY config ./config
# COPY keeps the files' modification times, which may be older than the
# stand-ins built above; touching the crate roots makes cargo rebuild the
# crate rather than keep the empty stand-in binary.
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked \
 && ./target/release/pathprobe check-config config/pathprobe.yml

FROM debian:${DEBIAN_RELEASE}-slim AS runtime

# A fixed, unprivileged UID, so that Kubernetes' runAsNonRoot can verify it
# and mounted files can be made readable to it.
RUN groupadd --system --gid 10001 pathprobe \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
            --home-dir /nonexistent --shell /usr/sbin/nologin pathprobe

COPY --from=build /build/target/release/pathprobe /usr/local/bin/pathprobe
COPY config/pathprobe.yml /etc/pathprobe/pathprobe.yml
# The history (history.json) lives here, as under systemd's StateDirectory=;
# mount a volume on it so that a new container keeps the status page's days.
RUN install -d -o 10001 -g 10001 -m 0700 /var/lib/pathprobe
ENV STATE_DIRECTORY=/var/lib/pathprobe
VOLUME ["/var/lib/pathprobe"]

USER 10001:10001

# 9813: /metrics, /probe and the /-/ endpoints. 5301: the responder, TCP for
# control and data, UDP for UDP probes.
EXPOSE 9813/tcp 5301/tcp 5301/udp

# No curl in the slim image: bash speaks HTTP/1.0 to /-/healthy over
# /dev/tcp and checks for a 200 status line. 127.0.0.1 reaches the default
# listener "[::]:9813", which accepts IPv4 too.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9813 && printf 'GET /-/healthy HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && read -r _ status _ <&3 && [ \"$status\" = 200 ]"]

ENTRYPOINT ["/usr/local/bin/pathprobe"]
CMD ["serve", "--config.file", "/etc/pathprobe/pathprobe.yml"]
