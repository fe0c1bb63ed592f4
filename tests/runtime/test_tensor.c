/* Tests for runtime/tensor and runtime/dtype: strides, views, row
 * addressing, byte sizes, ggml type ids and f16/bf16 conversions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runtime/tensor.h"

#include <math.h>
#include <string.h>

static void test_contiguous_strides(void **state) {
    (void)state;
    float buf[2 * 3 * 4];
    rt_tensor t = rt_tensor_3d(buf, RT_F32, RT_DEV_CPU, 2, 3, 4);
    assert_int_equal(t.stride[2], 4);
    assert_int_equal(t.stride[1], 16);
    assert_int_equal(t.stride[0], 48);
    assert_int_equal(rt_tensor_nelem(&t), 24);
    assert_int_equal(rt_tensor_nrows(&t), 6);
    assert_int_equal(rt_tensor_nbytes(&t), 96);
    assert_true(rt_tensor_is_contiguous(&t));
    assert_ptr_equal(rt_tensor_row(&t, 5), (char *)buf + 5 * 16);
    rt_tensor s = rt_tensor_slice0(&t, 1, 1);
    assert_ptr_equal(s.data, (char *)buf + 48);
    assert_int_equal(s.shape[0], 1);
    int64_t shp[2] = {6, 4};
    rt_tensor r = rt_tensor_reshape(&t, 2, shp);
    assert_int_equal(r.stride[0], 16);
    assert_true(rt_tensor_same_shape(&r, &t));
}

static void test_quantized_rows(void **state) {
    (void)state;
    uint8_t buf[3 * 2 * 18];
    rt_tensor t = rt_tensor_2d(buf, RT_Q4_0, RT_DEV_CPU, 3, 64);
    assert_int_equal(t.stride[0], 36);
    assert_int_equal(rt_tensor_nbytes(&t), 108);
    assert_ptr_equal(rt_tensor_row(&t, 2), buf + 72);
    assert_int_equal(rt_dtype_row_bytes(RT_Q4_K, 512), 288);
    assert_int_equal(rt_dtype_row_bytes(RT_Q4_K, 100), 0); /* not a block multiple */
    assert_int_equal(rt_dtype_row_bytes(RT_Q6_K, 256), 210);
    assert_int_equal(rt_dtype_row_bytes(RT_F16, 7), 14);
}

static void test_strided_view(void **state) {
    (void)state;
    float buf[4 * 8];
    rt_tensor t = rt_tensor_2d(buf, RT_F32, RT_DEV_CPU, 4, 6);
    t.stride[0] = 32; /* rows of 8 floats, 6 used */
    assert_false(rt_tensor_is_contiguous(&t));
    assert_ptr_equal(rt_tensor_row(&t, 3), (char *)buf + 96);
    rt_tensor one = rt_tensor_2d(buf, RT_F32, RT_DEV_CPU, 1, 6);
    one.stride[0] = 1000; /* size-1 dims don't matter */
    assert_true(rt_tensor_is_contiguous(&one));
}

static void test_ggml_ids(void **state) {
    (void)state;
    for (int t = 0; t < RT_DTYPE_COUNT; t++) {
        int g = rt_dtype_to_ggml((rt_dtype)t);
        assert_true(g >= 0);
        assert_int_equal(rt_dtype_from_ggml((uint32_t)g), t);
    }
    assert_int_equal(rt_dtype_from_ggml(2), RT_Q4_0);
    assert_int_equal(rt_dtype_from_ggml(14), RT_Q6_K);
    assert_int_equal(rt_dtype_from_ggml(30), RT_BF16);
    assert_int_equal(rt_dtype_from_ggml(6), -1); /* Q5_0 unsupported */
    assert_string_equal(rt_dtype_name(RT_Q5_K), "q5_K");
}

static void test_half_conversions(void **state) {
    (void)state;
    /* every finite f16 round-trips exactly */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        float f = rt_f16_to_f32((uint16_t)h);
        assert_int_equal(rt_f32_to_f16(f), h);
    }
    assert_int_equal(rt_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
    assert_int_equal(rt_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie -> even */
    assert_int_equal(rt_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
    assert_true(isnan(rt_f16_to_f32(rt_f32_to_f16(NAN))));
    assert_true(rt_bf16_to_f32(rt_f32_to_bf16(1.5f)) == 1.5f);
    assert_int_equal(rt_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80); /* tie -> even */
    assert_int_equal(rt_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contiguous_strides), cmocka_unit_test(test_quantized_rows),
        cmocka_unit_test(test_strided_view),       cmocka_unit_test(test_ggml_ids),
        cmocka_unit_test(test_half_conversions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
