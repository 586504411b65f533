package redisio_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// A lock on one Redis primary (appendfsync always: see the package's
// safety contract), whose token is the name's counter at the grant.
// (Not run by go test: it needs your server.)
func ExampleNewLock() {
	cli := redis.NewClient(&redis.Options{Addr: "redis:6379"})
	defer cli.Close()
	l, err := redisio.NewLock(cli, "orders")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	err = lock.Do(context.Background(), l, func(ctx context.Context, g lock.Grant) error {
		return write(ctx, g.Token()) // ctx ends the moment the hold is lost
	})
	if err != nil {
		log.Fatal(err)
	}
}

// write stands for the owner's request to its resource, stamped with t.
func write(ctx context.Context, t fencing.Token) error { return nil }
