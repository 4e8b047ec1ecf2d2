package metrics

import (
	"fmt"
	"net"
	"strconv"
)

// Config is the metrics section of the configuration (SPEC §19); the
// command embeds it as it is (--metrics sets Addr).
type Config struct {
	// Addr is where GET /metrics is served, host:port; "" (the default):
	// no metrics at all. A loopback address unless the scraper is
	// elsewhere (a Pod's 0.0.0.0:9090): what is served holds no secret
	// and names no thread, and it is served without auth (Prometheus's
	// annotation-driven scraping sends none).
	Addr string `yaml:"addr"`
}

// Validate refuses an address that is not host:port, naming the key.
func (c *Config) Validate() error {
	if c.Addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(c.Addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("metrics.addr %q: want host:port, such as 127.0.0.1:9090", c.Addr)
	}
	return nil
}
