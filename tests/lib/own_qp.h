/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
#ifndef RCM_TESTS_OWN_QP_H
#define RCM_TESTS_OWN_QP_H

#include <stdint.h>

/*
 * A QP this process owns, for the test programs that send REQs, REPs and
 * SIDR_REPs through the daemon (which sends them only for the QP's
 * owner).  port_spec is a real port, "DEVICE:PORT" (then an RC QP is
 * made on it once and moved to INIT, so that the kernel's resource tracking
 * names this process and that port), or anything else for a simulated
 * port (a number from the process ID, to register: a forked child
 * has its own).  Returns the QPN, or 0 with a
 * message on stderr.
 */
uint32_t own_qp(const char *port_spec);
/* A new QP on a real port at each call (a connection each, as a guest's
 * QPs are: a peer takes a QPN it still holds for a stale connection);
 * 0 on a simulated port or an error.  Kept for the process's life. */
uint32_t own_qp_new(const char *port_spec);

#endif
