/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_BENCH_ROUND_TRIP_H
#define RCM_BENCH_ROUND_TRIP_H

/*
 * bench_relay's floor: the machine's round trip between two threads
 * over a unix stream socket, each asleep in epoll_wait() until the
 * other writes, as a client and a daemon worker are on every hop of a
 * handshake.  Nothing is done with the bytes, so what it measures is
 * the scheduler's wake-up (on two idle CPUs, the cross-CPU one).
 */

/* The mean round trip in microseconds over about `seconds` of 256-byte
 * messages, or a negative errno value. */
double round_trip_us(double seconds);

#endif
