// base/env.h: the knob switch's reading of unset, empty, "0..." and other values.
#include "base/env.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace duet {
namespace {

TEST(EnvFlag, DefaultWhenUnsetOrEmptyOffOnZero) {
  const char* name = "DUET_TEST_ENV_FLAG";
  unsetenv(name);
  EXPECT_TRUE(env_flag(name, true));
  EXPECT_FALSE(env_flag(name, false));
  setenv(name, "", 1);
  EXPECT_TRUE(env_flag(name, true));
  EXPECT_FALSE(env_flag(name, false));
  setenv(name, "0", 1);
  EXPECT_FALSE(env_flag(name, true));
  setenv(name, "01", 1);
  EXPECT_FALSE(env_flag(name, true));
  setenv(name, "1", 1);
  EXPECT_TRUE(env_flag(name, false));
  setenv(name, "2", 1);
  EXPECT_TRUE(env_flag(name, false));
  unsetenv(name);
}

}  // namespace
}  // namespace duet
