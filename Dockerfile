# syntax=docker/dockerfile:1
# A small static image of the one inboxd binary, running as non-root.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/inboxd ./cmd/inboxd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/inboxd /usr/local/bin/inboxd
USER nonroot:nonroot
EXPOSE 8080 9091
ENTRYPOINT ["/usr/local/bin/inboxd"]
CMD ["--help"]
