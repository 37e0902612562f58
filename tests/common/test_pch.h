// The precompiled header of every test executable (cmake/SluiceTesting.cmake): third-party and
// standard headers only, which never change with Sluice's own code, so that editing a Sluice
// header rebuilds only the tests that include it.
#pragma once

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>
