// Package redisio is disco's Redis backend: a Session that owns one
// liveness key and one event loop, and the lock and election that run on
// it, with fencing tokens.
package redisio
