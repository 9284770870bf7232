package workload

import (
	"context"
	"sync"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/jepsen/history"
)

// observe starts one observer per lock: it follows the lock's holders (an election's leaders)
// through client.Client.Observe, straight to the nodes, and records each one reported as a
// history.Observe op until stop closes.
func (wl *Workload) observe(ctx context.Context, stop <-chan struct{}, wg *sync.WaitGroup) {
	var urls []string
	for _, ep := range wl.c.Endpoints() {
		urls = append(urls, wl.cfg.scheme()+"://"+ep.Addr)
	}
	octx, cancel := context.WithCancel(ctx)
	var owg sync.WaitGroup
	for i, lock := range wl.cfg.Locks {
		process := observerProcess(wl.cfg, i)
		c, err := client.New(urls, wl.cfg.clientOptions(process, client.WithRequestTimeout(wl.cfg.OpTimeout))...)
		if err != nil {
			continue // cannot happen with the nodes' addresses
		}
		owg.Add(1)
		go func() {
			defer owg.Done()
			defer c.Close()
			wl.observer(octx, c, process, lock)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
		owg.Wait()
	}()
}

// observer records the leaders one Observe reports. A report's state held at some instant
// after the observer began waiting for the report before it: the request that answered it
// was sent once that earlier report had been handed over.
func (wl *Workload) observer(ctx context.Context, c *client.Client, process int, lock string) {
	since := wl.rec.Now()
	ch := c.Observe(ctx, lock)
	for {
		waitFrom := wl.rec.Now()
		l, ok := <-ch
		if !ok {
			return
		}
		wl.rec.Add(history.Op{Process: process, Kind: history.Observe, Type: history.OK, Lock: lock, Invoke: since,
			Held: l.Held, OutSession: l.Session, OutToken: l.Token, OutIndex: l.ModifyIndex})
		since = waitFrom
	}
}
