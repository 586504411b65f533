// Package markstore holds durable mark stores for fencing guards
// (guard.WithStore): File keeps each scope's mark in a file of a directory,
// SQL in a table of any database/sql database with ON CONFLICT upserts
// (SQLite, PostgreSQL). A store backed by etcd is etcdio.MarkStore.
//
// This package imports no database driver: the caller opens the *sql.DB
// with the driver of its choice.
package markstore
