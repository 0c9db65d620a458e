// Command ceiling is the framework's ceiling for the webhook benchmark: a gin
// server that decodes the same webhook JSON with the daemon's own decoder
// (handlers.Decode) and stores nothing. bench/run.sh drives it next to the
// real daemon.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/gin-gonic/gin"

	"github.com/autocapture/autocapture/handlers"
)

func main() {
	addr := flag.String("web.listen-address", "127.0.0.1:9096", "address to listen on")
	flag.Parse()
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.POST("/hooks/alertmanager", decodeOnly)
	e.GET("/-/healthy", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	if err := http.ListenAndServe(*addr, e); err != nil {
		fmt.Fprintln(os.Stderr, "ceiling:", err)
		os.Exit(1)
	}
}

// decodeOnly reads and decodes the body, then answers with the alert count.
func decodeOnly(c *gin.Context) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, 1<<20))
	if err != nil {
		c.AbortWithStatusJSON(http.StatusRequestEntityTooLarge, gin.H{"error": err.Error()})
		return
	}
	p, err := handlers.Decode(body)
	if err != nil {
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ok", "alerts": len(p.Message.Alerts)})
}
