# The release image of lanes (goreleaser release: dockers_v2 in
# .goreleaser.yaml): the static binary goreleaser built, on distroless
# static, which holds CA certificates (TLS to NATS), time zones and a
# non-root user, and nothing else. goreleaser puts each platform's binary
# under <os>/<arch>/ in the build context.
#
# There is no shell in it: `lanes work --exec` (sh -c) needs an image of
# your own (a base with sh, and COPY --from this image /usr/local/bin/lanes);
# `lanes work --http` with the handler as a sidecar, `lanes apply`,
# `inspect`, `plan` and `simulate` run as they are.
FROM gcr.io/distroless/static-debian12:nonroot
ARG TARGETPLATFORM
COPY $TARGETPLATFORM/lanes /usr/local/bin/lanes
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/lanes"]
