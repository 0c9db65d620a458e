// Command hello is a tiny HTTP server used by testenv's own tests to prove
// BuildBinary, StartProcess, WaitHTTP, Stop and Kill9.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	srv := &http.Server{Addr: *addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		fmt.Println("hello: got SIGTERM, stopping")
		srv.Shutdown(context.Background())
	}()
	fmt.Println("hello: listening on", *addr)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}
