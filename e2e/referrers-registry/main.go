// Command referrers-registry serves go-containerregistry's in-memory registry, with the OCI 1.1
// referrers API turned on, on a loopback address: the registry the signature tests need beside
// distribution 2.8, which has no referrers API (tests/support/referrers_env.py starts it).
//
// It prints "listening on HOST:PORT" once it accepts connections (so -addr 127.0.0.1:0 picks a
// free port without a race), and one access-log line per request on stderr:
// "METHOD URL" for an answer the registry gave, "METHOD URL STATUS CODE MESSAGE" for an error.
// Everything lives in memory and goes with the process.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "the loopback address to listen on (port 0: any free one)")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		log.Fatalf("-addr %q is not HOST:PORT: %v", *addr, err)
	}
	// A test registry without authentication must never be reachable from another machine.
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		log.Fatalf("-addr %q is not a loopback address; this registry has no authentication", *addr)
	}
	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("cannot listen on %s: %v", *addr, err)
	}
	access := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	handler := registry.New(registry.WithReferrersSupport(true), registry.Logger(access))
	fmt.Printf("listening on %s\n", listener.Addr())
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(server.Serve(listener))
}
