// NCCL of the CUDA toolkit under /usr/local/cuda: linked and callable without
// a GPU (ncclGetVersion, ncclGetUniqueId).
#include <gtest/gtest.h>
#include <nccl.h>

TEST(NcclToolkit, VersionMatchesTheHeaderAndUniqueIdIsCreated) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
  ncclUniqueId id{};
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
}
