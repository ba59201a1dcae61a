package core

import (
	"context"
	"database/sql"
	"fmt"
)

// A Migration is one step of an object's schema: it changes the schema left by the steps before it
// (creates a table, adds a column, copies data). It runs in the turn, with the turn's context, and
// uses storage only: no Await.
type Migration func(ctx context.Context, s *Storage) error

// SQL is a Migration that runs query (one statement or several) with Exec.
func SQL(query string) Migration {
	return func(ctx context.Context, s *Storage) error {
		_, err := s.Exec(ctx, query)
		return err
	}
}

// migrationsSchema is the runtime's record of an object's applied schema steps: one row per step,
// numbered from 1. DeleteAll drops it with everything else, so the steps run again after it.
const migrationsSchema = `CREATE TABLE IF NOT EXISTS main._durable_migrations(version INTEGER PRIMARY KEY, applied INTEGER NOT NULL)`

// Migrate brings the object's schema up to date: step i (numbered from 1) runs once in the object's
// life, after the steps before it. The version reached is kept in the runtime's own table, which
// user SQL cannot touch (user_version and BEGIN are not available to user SQL). Call it first thing
// in the constructor, with the constructor's context: every activation checks the version (one
// read) and runs only the steps the object has not had yet, all in one nested transaction, so a
// failing step leaves none applied and Migrate returns its error naming it. Never change or remove
// a step once it has run anywhere; add new ones at the end.
//
// If the object's stored version is higher than len(steps) (its data was written by a newer version
// of the code), Migrate fails with ErrSchemaTooNew and changes nothing.
//
// Objects whose constructor created its tables with CREATE TABLE IF NOT EXISTS before it used
// Migrate move to it with that same statement as step 1: it finds the tables there, and the steps
// after it run as for any object.
func (s *Storage) Migrate(ctx context.Context, steps ...Migration) error {
	t, err := s.o.inTurn(ctx)
	if err != nil {
		return err
	}
	for i, step := range steps {
		if step == nil {
			return fmt.Errorf("%w: Migrate: step %d is nil", ErrInvalidArgument, i+1)
		}
	}
	st, err := t.db()
	if err != nil {
		return err
	}
	var have int
	err = st.QueryOwn(`SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = '_durable_migrations'`, nil,
		func(r *sql.Rows) error { return r.Scan(&have) })
	if err == nil && have == 1 {
		err = st.QueryOwn("SELECT coalesce(max(version), 0) FROM main._durable_migrations", nil,
			func(r *sql.Rows) error { return r.Scan(&have) })
	}
	if err != nil {
		return fmt.Errorf("core: migrate: %w", err)
	}
	switch {
	case have > len(steps):
		return fmt.Errorf("%w: %s/%q is at version %d, the code knows %d steps", ErrSchemaTooNew, s.o.ns.name, s.o.name, have, len(steps))
	case have == len(steps):
		return nil
	}
	return s.Transaction(ctx, func() error {
		st, err := t.write()
		if err == nil {
			err = st.ExecOwn(migrationsSchema)
		}
		if err != nil {
			return fmt.Errorf("core: migrate: %w", err)
		}
		for v := have + 1; v <= len(steps); v++ {
			if err := steps[v-1](ctx, s); err != nil {
				return fmt.Errorf("core: migrate %s/%q to version %d: %w", s.o.ns.name, s.o.name, v, err)
			}
			if st, err = t.write(); err == nil {
				err = st.ExecOwn("INSERT INTO main._durable_migrations(version, applied) VALUES (?, ?)", v, s.o.rt.now().UnixMilli())
			}
			if err != nil {
				return fmt.Errorf("core: migrate: %w", err)
			}
		}
		st.ForgetStmts() // they may name changed tables
		return nil
	})
}
