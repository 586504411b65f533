// Package markstore holds durable mark stores for fencing guards
// (guard.WithStore): File keeps each scope's mark in a file of a directory
// (which the processes of one host may share), SQL in a table of any
// database/sql database with ON CONFLICT upserts (SQLite, PostgreSQL),
// which any number of hosts may share; SQL.CheckTx checks a token inside
// the resource's own transaction. A store backed by etcd is
// etcdio.MarkStore. Both implement guard.RaiseLoader.
//
// This package imports no database driver: the caller opens the *sql.DB
// with the driver of its choice.
package markstore
