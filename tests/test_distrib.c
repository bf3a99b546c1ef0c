/* Sharing a sweep among processes without MPI (src/app/plan.h, src/results/point_records.h,
 * docs/scaling.md "Sweeps over ranks and jobs"): points are given to owners by estimated cost,
 * a point's records survive the trip through its part file bit for bit, a part of another
 * configuration is not taken for the point's, and the communicator of one process is a copy.
 * The runs under mpirun are checked by tests/test_mpi.py. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "plan.h"
#include "point_records.h"
#include "results.h"
#include "testutil.h"

/* A plan of hand-set costs (only n_points and cost are read by ttt_plan_assign). */
static ttt_plan *plan_costs(const double *cost, int n) {
    ttt_plan *p = calloc(1, sizeof *p);
    p->points = calloc((size_t)n, sizeof *p->points);
    p->n_points = n;
    for (int i = 0; i < n; i++) p->points[i].cost = cost[i];
    return p;
}

/* Costs 1, 8, 3, 3, 2, 7 over 2 owners, worked by hand with "costliest first, to the least
 * loaded owner, ties to the lowest owner": 8 → 0; 7 → 1; 3 (point 2) → 1 (7 < 8); 3 (point 3)
 * → 0 (8 < 10); 2 → 1 (10 < 11); 1 → 0 (11 < 12). Loads 12 and 12. Round robin would give 14
 * and 10. */
START_TEST(assign_balances_cost) {
    const double cost[6] = {1, 8, 3, 3, 2, 7};
    ttt_plan *p = plan_costs(cost, 6);
    int owner[6];
    ttt_plan_assign(p, 2, owner);
    const int want[6] = {0, 0, 1, 0, 1, 1};
    for (int i = 0; i < 6; i++) ck_assert_msg(owner[i] == want[i], "point %d: owner %d, want %d",
                                              i, owner[i], want[i]);
    /* more owners than points: each point alone, the rest idle */
    ttt_plan_assign(p, 8, owner);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < i; j++) ck_assert_int_ne(owner[i], owner[j]);
    /* one owner: everything */
    ttt_plan_assign(p, 1, owner);
    for (int i = 0; i < 6; i++) ck_assert_int_eq(owner[i], 0);
    free(p->points);
    free(p);
}
END_TEST

/* Records saved after `from` come back with the same keys, the same doubles (bit for bit:
 * 0.1, 1/3, a subnormal, −0, NaN, ±Inf) and the same summary flags; text with a tab or a newline
 * comes back with spaces (the format's separators). */
START_TEST(part_round_trip) {
    char *dir = tu_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/point3.rec", dir);
    ttt_results *res = ttt_results_new("t");
    ttt_record r;
    ttt_record_clear(&r);
    ttt_record_str(&r, "skip", "before from");
    ttt_results_add(res, &r, 1);
    const double nums[] = {0.1, 1.0 / 3.0, 4.9e-324, -0.0, NAN, INFINITY, -INFINITY, 12345678901.0};
    const int nn = (int)(sizeof nums / sizeof nums[0]);
    ttt_record_clear(&r);
    ttt_record_str(&r, "series", "layer.preset=gla, train.lr=1e-2");
    for (int i = 0; i < nn; i++) {
        char key[16];
        snprintf(key, sizeof key, "x%d", i);
        ttt_record_num(&r, key, nums[i]);
    }
    ttt_results_add(res, &r, 0);
    ttt_record_clear(&r);
    ttt_record_str(&r, "note", "a\tb\nc = d");
    ttt_record_num(&r, "step", 7);
    ttt_results_add(res, &r, 1);
    ttt_error err = {0};
    ck_assert_msg(ttt_part_save(res, 1, path, "0123456789abcdef", &err) == TTT_OK, "%s", err.msg);

    ttt_results *back = ttt_results_new("t");
    int found = 0;
    ck_assert_msg(ttt_part_load(back, path, "0123456789abcdef", &found, &err) == TTT_OK, "%s",
                  err.msg);
    ck_assert_int_eq(found, 1);
    ck_assert_int_eq(ttt_results_count(back), 2);
    const ttt_record *a = ttt_results_get(back, 0);
    ck_assert_str_eq(ttt_record_get(a, "series")->str, "layer.preset=gla, train.lr=1e-2");
    for (int i = 0; i < nn; i++) {
        char key[16];
        snprintf(key, sizeof key, "x%d", i);
        const ttt_field *f = ttt_record_get(a, key);
        ck_assert_ptr_nonnull(f);
        ck_assert(f->is_num);
        if (isnan(nums[i])) ck_assert(isnan(f->num));
        else ck_assert_msg(memcmp(&f->num, &nums[i], sizeof(double)) == 0, "%s: %a != %a", key,
                           f->num, nums[i]);
    }
    const ttt_record *b = ttt_results_get(back, 1);
    ck_assert_str_eq(ttt_record_get(b, "note")->str, "a b c = d");
    ck_assert_int_eq((int)ttt_record_get(b, "step")->num, 7);
    /* summary flags: the CSV of the loaded records holds the summary row only */
    ck_assert_int_eq(ttt_results_write(back, dir, &err), TTT_OK);
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    char *csv = tu_read_file(path);
    ck_assert_ptr_nonnull(strstr(csv, "a b c = d"));
    ck_assert_ptr_null(strstr(csv, "gla"));
    free(csv);
    ttt_results_free(back);

    /* another configuration's part is not this point's */
    snprintf(path, sizeof path, "%s/point3.rec", dir);
    back = ttt_results_new("t");
    ck_assert_int_eq(ttt_part_load(back, path, "fedcba9876543210", &found, &err), TTT_OK);
    ck_assert_int_eq(found, 0);
    ck_assert_int_eq(ttt_results_count(back), 0);
    /* no part: not found, no error */
    snprintf(path, sizeof path, "%s/point4.rec", dir);
    ck_assert_int_eq(ttt_part_load(back, path, "0123456789abcdef", &found, &err), TTT_OK);
    ck_assert_int_eq(found, 0);
    /* a damaged part is an error naming the file and line: a line that is not a record, or
     * one without its checksum (a part written before checksums, or cut) */
    ck_assert_int_eq(tu_write_file(path, "ttt-part 2 0123456789abcdef\n"
                                         "S\tnx=1\t#da06d213a87c9f45\nbroken\n"), 0);
    ck_assert_int_eq(ttt_part_load(back, path, "0123456789abcdef", &found, &err), TTT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "point4.rec:3") && strstr(err.msg, "without its checksum"),
                  "%s", err.msg);
    ck_assert_int_eq(found, 0);
    /* the same record under a checksum that its bytes do not give */
    ck_assert_int_eq(tu_write_file(path, "ttt-part 2 0123456789abcdef\n"
                                         "S\tnx=1\t#da06d213a87c9f46\n"), 0);
    ck_assert_int_eq(ttt_part_load(back, path, "0123456789abcdef", &found, &err), TTT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "point4.rec:2: checksum mismatch"), "%s", err.msg);
    /* and a part of the format before checksums is refused by name */
    ck_assert_int_eq(tu_write_file(path, "ttt-part 1 0123456789abcdef\nS\tnx=1\n"), 0);
    ck_assert_int_eq(ttt_part_load(back, path, "0123456789abcdef", &found, &err), TTT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "point4.rec:1: records of format 1"), "%s", err.msg);
    /* one digit changed in a saved part (x7 = 12345678901 = 0x1.6fee0e1a8p+33: its first
     * fraction digit) is refused, naming the file and line, and nothing is merged */
    snprintf(path, sizeof path, "%s/point3.rec", dir);
    char *text = tu_read_file(path);
    ck_assert_ptr_nonnull(text);
    char *digit = strstr(text, "nx7=0x1.6");
    ck_assert_ptr_nonnull(digit);
    digit[strlen("nx7=0x1.")] = '7';
    snprintf(path, sizeof path, "%s/point5.rec", dir);
    ck_assert_int_eq(tu_write_file(path, text), 0);
    free(text);
    ttt_results_free(back);
    back = ttt_results_new("t");
    ck_assert_int_eq(ttt_part_load(back, path, "0123456789abcdef", &found, &err), TTT_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "point5.rec:2: checksum mismatch"), "%s", err.msg);
    ck_assert_int_eq(found, 0);
    ttt_results_free(back);
    ttt_results_free(res);
    tu_rmtree(dir);
    free(dir);
}
END_TEST

/* Alone, the collectives are the identity: what the trainer and the sweep rely on without MPI. */
START_TEST(comm_self_is_a_copy) {
    const ttt_comm *c = &ttt_comm_self;
    ck_assert_int_eq(c->rank, 0);
    ck_assert_int_eq(c->size, 1);
    const char send[5] = "abcd";
    char recv[5] = {0};
    ttt_error err = {0};
    ck_assert_int_eq(ttt_comm_allgather(c, recv, send, 5, &err), TTT_OK);
    ck_assert_str_eq(recv, "abcd");
    ck_assert_int_eq(ttt_comm_all(c, 1), 1);
    ck_assert_int_eq(ttt_comm_all(c, 0), 0);
    long lo, hi;
    ttt_comm_minmax(c, 42, &lo, &hi);
    ck_assert(lo == 42 && hi == 42);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("distrib");
    TCase *c = tcase_create("core");
    tcase_add_test(c, assign_balances_cost);
    tcase_add_test(c, part_round_trip);
    tcase_add_test(c, comm_self_is_a_copy);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }
